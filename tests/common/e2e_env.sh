# Sourced by the end-to-end scripts once they have named their arguments ($simlib among them):
# sim/'s libraries first on the library path, the coordinator's hub on loopback
# (loopback_coord.sh), and a scratch folder $tmp that is removed at exit.
export LD_LIBRARY_PATH=$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
. "$(dirname "${BASH_SOURCE[0]}")/loopback_coord.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
