# The first model id that /v1/models ($1) lists, into $model, with shell
# builtins only (issue 34: the probe runs in every read of every host). It reads
# what the pipeline tests/unit/test_probe_model_id.py keeps as PIPELINE read
# (tr, then sed, then head), and that test runs both on the same answers.
first_model_id() {
  model=
  set -f; IFS=',{
'
  for _mf in $1; do
    _mf=${_mf#"${_mf%%[![:space:]]*}"}
    case $_mf in '"id"'*) _mf=${_mf#'"id"'} ;; *) continue ;; esac
    _mf=${_mf#"${_mf%%[![:space:]]*}"}
    case $_mf in :*) _mf=${_mf#:} ;; *) continue ;; esac
    _mf=${_mf#"${_mf%%[![:space:]]*}"}
    case $_mf in '"'*) _mf=${_mf#'"'} ;; *) continue ;; esac
    _mid=${_mf%%[!A-Za-z0-9_./:\\-]*}
    case ${_mf#"$_mid"} in '"'*) model=$_mid; break ;; esac
  done
  unset IFS; set +f
}
