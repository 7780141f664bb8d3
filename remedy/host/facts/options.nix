# Constant: everything that varies comes from the environment (builtins.getEnv, --impure),
# so host data never enters the expression's text.
let
  env = builtins.getEnv;
  flake = builtins.getFlake (env "REMEDY_FLAKE_DIR");
  system = flake.nixosConfigurations.${env "REMEDY_FLAKE_HOST"};
  managed = "${flake.outPath}/${env "REMEDY_MANAGED_FILE"}";
  without = system.extendModules { modules = [ { disabledModules = [ managed ]; } ]; };
  at = path: builtins.foldl'
    (acc: n: if builtins.isAttrs acc && acc ? ${n} then acc.${n} else null)
    without.options (builtins.filter builtins.isString (builtins.split "\\." path));
  one = path: let o = at path; in
    if !(builtins.isAttrs o) || (o._type or null) != "option" then { exists = false; }
    else {
      exists = true;
      highestPrio = o.highestPrio;
      definitions = map (d: { inherit (d) file value; }) o.definitionsWithLocations;
    };
in builtins.mapAttrs (name: one) (builtins.fromJSON (env "REMEDY_OPTIONS"))
