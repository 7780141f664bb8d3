# The tool-call probe (remedy/host/probe.sh) as the snapshot runs it.
# @include journal_trust.sh
echo "@@remedy:section probe"
remedy_probe() {
# @include probe.sh
}

# The model id from MODEL_RECORD when it names this server process (UNIT's main PID and
# start, this boot, this URL): one curl, not two. A 404 (the id is no longer served)
# and the probe asks /v1/models as before; a new id is recorded, atomically.
probe_record() {
  _r=@MODEL_RECORD@
  # shellcheck disable=SC2174  # the last directory is remedy's own
  mkdir -p -m 0700 -- "${_r%/*}" 2>/dev/null \
    && _tmp=$(mktemp "${_r%/*}/.probe-model.XXXXXXXX" 2>/dev/null) || return 0
  { printf 'key %s\nmodel %s\n' "$_pk" "$model" >"$_tmp" && chmod 0600 -- "$_tmp" \
    && mv -f -T -- "$_tmp" "$_r"; } || rm -f -- "$_tmp"
}
if command -v curl >/dev/null 2>&1; then
  _pk='' _pm='' _b=
  if [ -z "$REMEDY_PROBE_MODEL" ] && [ -n "$_mainpid" ] && [ "$_mainpid" != 0 ]; then
    { read -r _b </proc/sys/kernel/random/boot_id; } 2>/dev/null
    _pk="$_b $_mainpid $_aets $REMEDY_PROBE_URL"
    case $_pk in *"$_nl"*) _pk= ;; esac
  fi
  if [ -n "$_pk" ]; then
    journal_trust @MODEL_RECORD@
    if [ -z "$_why" ] && [ -s @MODEL_RECORD@ ]; then
      { IFS= read -r _l && IFS= read -r _m; } <@MODEL_RECORD@
      [ "$_l" != "key $_pk" ] || _pm=${_m#model }
    fi
  fi
  if [ -n "$_pm" ]; then
    _po=$(remedy_probe "$REMEDY_PROBE_URL" "$_pm" "$REMEDY_PROBE_TIMEOUT" \
      "$REMEDY_PROBE_TRIES" "$REMEDY_PROBE_HEAD" "$REMEDY_PROBE_TAIL" 2>&1; echo .)
    case $_po in
    *"$_nl@STATUS@404$_nl"*) _pm= ;;
    *) printf '%s' "${_po%.}" ;;
    esac
  fi
  if [ -z "$_pm" ]; then
    remedy_probe "$REMEDY_PROBE_URL" "$REMEDY_PROBE_MODEL" "$REMEDY_PROBE_TIMEOUT" \
      "$REMEDY_PROBE_TRIES" "$REMEDY_PROBE_HEAD" "$REMEDY_PROBE_TAIL" 2>&1
    [ -z "$_pk" ] || [ -z "$model" ] || probe_record
  fi
else
  echo "curl: (2) curl is not installed on this host"
fi
