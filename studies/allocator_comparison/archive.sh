# The runs archive of a comparison study, shared by its sweep.sh and report.sh (sourced):
#   archive_as_runs_land RUNS ARCHIVE  restores ARCHIVE's runs into RUNS, then saves every
#                                      finished run of RUNS into ARCHIVE each minute and on exit
#   runs_or_archive ARCHIVE [RUNS]     sets RUNS: the given folder, or a temporary one that
#                                      ARCHIVE's runs are restored into, removed on exit
# archive_runs.py (headline/) writes the archive: fixed bytes for the same runs.
ARCHIVE_PY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/headline/archive_runs.py"

archive_as_runs_land() {
  local runs=$1 archive=$2
  mkdir -p "$runs"
  python "$ARCHIVE_PY" restore "$runs" "$archive"
  (while sleep 60; do python "$ARCHIVE_PY" save "$runs" "$archive" > /dev/null; done) &
  # shellcheck disable=SC2064  # expand now: the saver's pid and the paths of this call
  trap "kill $! 2>/dev/null; python '$ARCHIVE_PY' save '$runs' '$archive'" EXIT
}

runs_or_archive() {
  local archive=$1
  if [ $# -ge 2 ]; then
    RUNS=$2
  else
    RUNS=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$RUNS'" EXIT
    python "$ARCHIVE_PY" restore "$RUNS" "$archive" > /dev/null
  fi
}
