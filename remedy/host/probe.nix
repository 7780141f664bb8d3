# The probe's answer (the file $REMEDY_PROBE_OUT: what probe.sh printed) read as
# remedy.core.readings.probe.read_curl_output reads it: one line, OUTCOME then a
# tab then the reason. OUTCOME: parsed, unparsed, inconclusive (prose),
# http_error or unreachable. A body that is not JSON makes Nix fail: the caller
# says so.
let
  inherit (builtins) filter isString split substring stringLength match
    elemAt length head concatStringsSep fromJSON isAttrs isList toJSON getEnv
    readFile replaceStrings any;
  lines = filter isString (split "\n" (readFile (getEnv "REMEDY_PROBE_OUT")));
  starts = p: l: substring 0 (stringLength p) l == p;
  after = p: l: substring (stringLength p) (stringLength l) l;
  last = l: elemAt l (length l - 1);
  trim = s: let m = match "[[:space:]]*(.*[^[:space:]])[[:space:]]*" s;
    in if m == null then "" else head m;
  statusMark = "@@remedy-http-status=";
  modelMark = "@@remedy-model=";
  marks = [ statusMark modelMark "@@remedy-probe-tries=" "curl: (" ];
  codes = map (after statusMark) (filter (starts statusMark) lines);
  code = if codes == [] then null else
    let m = match "0*([0-9]+)" (trim (last codes));
        n = if m == null then 0 else fromJSON (head m);
    in if n > 0 then n else null;
  models = map (after modelMark) (filter (starts modelMark) lines);
  model = if models == [] then null else trim (last models);
  errors = filter (starts "curl: (") lines;
  body = trim (concatStringsSep "\n"
    (filter (l: !(builtins.any (m: starts m l) marks)) lines));
  short = s: substring 0 160 s;
  error = concatStringsSep "; " errors;
  doc = if body == "" then { } else fromJSON body;
  choice = if isAttrs doc && isList (doc.choices or null) && doc.choices != [ ]
    then head doc.choices else null;
  oneLine = s: replaceStrings [ "\n" ] [ " " ] s;
  message = if isAttrs choice && isAttrs (choice.message or null)
    then choice.message else null;
  content = if message != null && isString (message.content or null)
    then message.content else "";
  calls = if message != null && isList (message.tool_calls or null)
    then message.tool_calls else [ ];
  hasMark = any (m: match ".*${m}.*" (oneLine content) != null)
    [ "<tool_call>" "<function=" ];
  fn = let c = head calls; in
    if isAttrs c && isAttrs (c.function or null) then c.function else { };
  args = let a = fn.arguments or ""; in
    if isString a && match "[[:space:]]*[{].*" (oneLine a) != null
    then fromJSON a else null;
  say = outcome: reason:
    "${outcome}\t${replaceStrings [ "\n" "\t" ] [ " " " " ] reason}";
in
if models != [ ] && model == "" then
  say "http_error" "/v1/models lists no model id: '${short body}'"
else if code == null then
  say "unreachable" (if error == "" then "no answer" else error)
else if code != 200 then
  let msg = if isAttrs doc && isString (doc.message or null)
    then doc.message else null; in
  say "http_error"
    ("HTTP ${toString code}" + (if msg != null then ": ${msg}" else ""))
else if message == null then
  say "http_error" "HTTP 200 but not a chat completion"
else if calls == [ ] then
  (if hasMark then say "unparsed" ("HTTP 200 with no tool_calls and the raw "
      + "<tool_call> text in content: the tool-call parser did not parse the "
      + "model's output")
   else say "inconclusive" ("HTTP 200 in prose: the model answered without "
      + "calling the tool (says nothing about the parser)"))
else if (fn.name or null) != "get_weather" || !(isAttrs args) then
  say "unparsed" "tool call malformed: ${substring 0 120 (toJSON fn)}"
else
  say "parsed" "get_weather called with object arguments"
