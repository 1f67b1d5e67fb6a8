# Sourced by the check scripts once they have named their arguments: fail MESSAGE prints
# "FAIL: MESSAGE" and exits 1, and a scratch folder $tmp is made and removed at exit.
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
