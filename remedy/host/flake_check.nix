# A flake output of host data flake_checks, for the bumped lock: NAME#ATTR is
# the output ATTR of the host flake's input NAME (as its flake.lock locks it),
# or of the host flake itself for self#ATTR. Constant text: the names come from
# the environment (--impure).
let
  env = builtins.getEnv;
  flake = builtins.getFlake (env "REMEDY_FLAKE_DIR");
  name = env "REMEDY_CHECK_INPUT";
  root = if name == "self" then flake else flake.inputs.${name} or null;
  found = builtins.foldl'
    (acc: n: if builtins.isAttrs acc && acc ? ${n} then acc.${n} else null)
    root (builtins.filter builtins.isString
      (builtins.split "\\." (env "REMEDY_CHECK_ATTR")));
in if found == null then throw "remedy: no such flake output" else found
