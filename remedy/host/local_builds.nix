# What of a `nix derivation show` (the file $REMEDY_SHOW) would compile on the
# host: the store paths of every derivation that is neither a config derivation
# (preferLocalBuild) nor a text file of nixpkgs' writeTextFile family
# (pkgs/build-support/trivial-builders: `text` passed as a file and a build
# command that only moves it into place), one per line. Every shape Nix has
# printed: up to 2.31 keys are store paths; 2.32 drops the /nix/store/ prefix;
# 2.33 moves the inputs; 2.34 wraps the map in {"version", "derivations"}.
let
  show = builtins.fromJSON (builtins.readFile (builtins.getEnv "REMEDY_SHOW"));
  drvs =
    if !builtins.isAttrs show then throw "remedy: not a JSON object"
    else if builtins.isAttrs (show.derivations or null) then show.derivations
    else show;
  storePath = k:
    if builtins.substring 0 11 k == "/nix/store/" then k else "/nix/store/" + k;
  strings = builtins.filter builtins.isString;
  trim = l:
    let m = builtins.match "[[:space:]]*(.*[^[:space:]])[[:space:]]*" l;
    in if m == null then "" else builtins.head m;
  code = s: builtins.filter (l: l != "" && builtins.substring 0 1 l != "#")
    (map trim (strings (builtins.split "\n" s)));
  targetOf = "([A-Za-z0-9_]+)=\\$out('[^']*'|[A-Za-z0-9_./+@-]*)";
  # writeTextFile's build command, line by line, in the forms nixpkgs has had
  # (T: its target variable)
  shapes = t: [
    (t + "=\\$out('[^']*'|[A-Za-z0-9_./+@-]*)")
    ("mkdir -p \"\\$\\(dirname \"\\$" + t + "\"\\)\"")
    "if \\[ -e \"\\$textPath\" ]; then"
    ("mv \"\\$textPath\" \"\\$" + t + "\"")
    "else"
    ("echo -n \"\\$text\" > \"\\$" + t + "\"")
    "fi"
    "if \\[ -n \"\\$executable\" ]; then"
    ("chmod \\+x \"\\$" + t + "\"")
    "eval \"\\$checkPhase\""
    ("\\(test -n \"\\$executable\" && chmod \\+x \"\\$" + t
      + "\"\\) \\|\\| true")
  ];
  textFile = env:
    let
      lines = code (env.buildCommand or "");
      found = builtins.filter (m: m != null)
        (map (builtins.match targetOf) lines);
      t = builtins.head (builtins.head found);
    in
      builtins.elem "text"
        (strings (builtins.split "[[:space:]]+" (env.passAsFile or "")))
      && found != []
      && builtins.elem ("mv \"$textPath\" \"$" + t + "\"") lines
      && builtins.all
        (l: builtins.any (p: builtins.match p l != null) (shapes t)) lines;
  compiles = key: drv:
    if !builtins.isAttrs drv then throw "remedy: '${key}' is not a derivation"
    else if !builtins.isAttrs (drv.env or null)
    then throw "remedy: '${key}' has no env object"
    else !((drv.env.preferLocalBuild or "") == "1" || textFile drv.env);
  heavy = builtins.filter (k: compiles k drvs.${k}) (builtins.attrNames drvs);
in
builtins.concatStringsSep "" (map (k: storePath k + "\n") heavy)
