# Sourced by the tool build scripts (POSIX sh): says on stderr what is being
# built before a long `go build` and keeps saying it is still building, so a
# first `make deps` or `make demo` does not sit silent for ten minutes.
#
# The scripts build with -gcflags=all=-dwarf=false: every tool is linked
# with -s -w, which throws the debug information away, so the compiler need
# not write it (a few percent of each build's CPU).
#
# progress NAME DEST ESTIMATE CMD [ARG...]
#   prints "building NAME into DEST (ESTIMATE)", runs CMD with a heartbeat
#   every PROGRESS_EVERY seconds (default 30) and returns CMD's status. The
#   heartbeat ends with CMD, also when CMD fails or the script is
#   interrupted: no loop is left behind. It sets no EXIT trap: an
#   interrupt ends the heartbeat and exits, which runs the script's own
#   EXIT cleanup (a shell cannot read back a trap to restore it).

progress() {
	_p_name=$1 _p_dest=$2 _p_est=$3
	shift 3
	echo "building $_p_name into $_p_dest ($_p_est)" >&2
	_p_start=$(date +%s)
	_p_parent=$$
	(
		# The sleep is waited for, so TERM ends it with the loop.
		trap 'kill "$_p_sleep" 2>/dev/null; wait "$_p_sleep" 2>/dev/null; exit 0' TERM
		while :; do
			sleep "${PROGRESS_EVERY:-30}" &
			_p_sleep=$!
			wait "$_p_sleep"
			# Stop on our own should the script die without its trap.
			kill -0 "$_p_parent" 2>/dev/null || exit 0
			_p_s=$(($(date +%s) - _p_start))
			printf 'still building %s (%dm%02ds)\n' "$_p_name" $((_p_s / 60)) $((_p_s % 60)) >&2
		done
	) &
	_p_beat=$!
	trap '_progress_stop; exit 130' INT
	trap '_progress_stop; exit 143' TERM
	_p_status=0
	"$@" || _p_status=$?
	_progress_stop
	trap - INT TERM
	_p_s=$(($(date +%s) - _p_start))
	if [ "$_p_status" -eq 0 ]; then
		printf 'built %s in %dm%02ds\n' "$_p_name" $((_p_s / 60)) $((_p_s % 60)) >&2
	else
		printf 'building %s failed after %dm%02ds (exit status %d)\n' "$_p_name" $((_p_s / 60)) $((_p_s % 60)) "$_p_status" >&2
	fi
	return "$_p_status"
}

# _progress_stop ends the heartbeat and reaps it.
_progress_stop() {
	kill "$_p_beat" 2>/dev/null || true
	wait "$_p_beat" 2>/dev/null || true
}

# cached BIN STAMP WANT: when BIN is built and its STAMP file holds WANT
# (the version, and whatever else the build depends on), prints BIN and
# ends the script: the cached tool is used as it is.
cached() {
	if built "$1" "$2" "$3"; then
		echo "$1"
		exit 0
	fi
}

# built BIN STAMP WANT: whether BIN is built and its STAMP holds WANT (for
# a script that builds several binaries and checks each).
built() {
	[ -x "$1" ] && [ -f "$2" ] && [ "$(cat "$2")" = "$3" ]
}

# go_tool NAME VERSION DIR ESTIMATE PACKAGE [ARG...]: builds PACKAGE (a
# command's import path) at VERSION from the Go module proxy with `go
# install` into DIR/NAME, its stamp DIR/NAME.version, unless cached; prints
# the binary's path and ends the script. ARGs go to go install before the
# package (-ldflags). The tool is not a dependency of the module: go
# install builds it from its own go.mod. It is built into a directory of its
# own, then renamed: a half-built tool is never on PATH. -p=2 bounds the
# compiles at once, and their memory, on a machine with more cores.
go_tool() {
	_g_name=$1 _g_version=$2 _g_dir=$3 _g_est=$4 _g_pkg=$5
	shift 5
	cached "$_g_dir/$_g_name" "$_g_dir/$_g_name.version" "$_g_version"
	command -v go >/dev/null 2>&1 || PATH=$PATH:/usr/local/go/bin
	mkdir -p "$_g_dir"
	_g_tmp=$(mktemp -d "$_g_dir/.$_g_name-build.XXXXXX")
	trap 'rm -rf "$_g_tmp"' EXIT
	export CGO_ENABLED=0 GOBIN="$_g_tmp" GOFLAGS="-mod=mod -p=2"
	progress "$_g_name $_g_version" "$_g_dir/$_g_name" "$_g_est" go install -trimpath -gcflags=all=-dwarf=false "$@" "$_g_pkg@$_g_version" >&2
	mv "$_g_tmp/$_g_name" "$_g_dir/$_g_name"
	echo "$_g_version" >"$_g_dir/$_g_name.version"
	echo "$_g_dir/$_g_name"
	exit 0
}
