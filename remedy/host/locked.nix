# remedy.core.readings.nix.parse_flake_lock's reading of flake.lock, in Nix: the
# input's node (following a `follows` path), then its rev, url (locked, else
# original) and ref.
let
  env = builtins.getEnv;
  lock = builtins.fromJSON (builtins.readFile (env "REMEDY_LOCK"));
  nodes = lock.nodes;
  root = lock.root or "root";
  resolve = ref:
    if builtins.isList ref
    then builtins.foldl' (key: hop: resolve nodes.${key}.inputs.${hop}) root ref
    else ref;
  node = nodes.${resolve nodes.${root}.inputs.${env "REMEDY_INPUT"}};
  locked = node.locked or { };
  original = node.original or { };
  url = spec:
    let kind = spec.type or ""; in
    if kind == "" then ""
    else if kind == "path" && spec ? path then "path:" + spec.path
    else if kind == "git" && spec ? url then
      (if builtins.substring 0 4 spec.url == "git+"
       then spec.url else "git+" + spec.url)
    else if (kind == "tarball" || kind == "file") && spec ? url then spec.url
    else if kind == "github" || kind == "gitlab" || kind == "sourcehut"
    then "${kind}:${spec.owner or ""}/${spec.repo or ""}"
    else spec.url or "";
  u = if url locked != "" then url locked else url original;
in
"${locked.rev or ""}\n${u}\n${locked.ref or original.ref or ""}\n"
