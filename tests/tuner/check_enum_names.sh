#!/usr/bin/env bash
# Enum settings are compared by name everywhere: no product file compares a field that an enum row
# of the environment table fills (AUTOHA_HA's `ha`, `qp_method`, `health_action`, `mode`, ...) with
# a bare number, as in `s->ha == 1`; it writes AH_HA_POLICY_PATH (ah_env.h). The fields come from
# the table itself (its AH_ENV_ENUM and AH_ENV_QP_SPORT rows), so a new enum row is checked too;
# and the names of ah_env.h must be their choices' indexes in the rows (off|path|port|nic: 0..3).
#   check_enum_names.sh SOURCE_DIR
set -euo pipefail
src=$1
fail() { echo "FAIL: $*"; exit 1; }
table=$(grep -rl --include='*.c' 'static const ah_env_var_t env_table\[\]' "$src" --exclude-dir=build \
        --exclude-dir=tests | head -1)
[ -n "$table" ] || fail "no environment table (env_table[]) found under $src"
# Each row starts with {"AUTOHA_...", TYPE, and names its field in FIELD(f) or FIELD_FALLBACK(f, ...).
fields=$(awk '/^ *\{"AUTOHA_/ { split($0, a, ","); gsub(/ /, "", a[2]); type = a[2] }
              /FIELD(_FALLBACK)?\(/ { if (type == "AH_ENV_ENUM" || type == "AH_ENV_QP_SPORT") {
                  s = $0; sub(/.*FIELD(_FALLBACK)?\(/, "", s); sub(/[,)].*/, "", s); print s }
                type = "" }' "$table" | sort -u)
n=$(echo "$fields" | grep -c . || true)
[ "$n" -ge 5 ] || fail "found only $n enum fields in $table: $(echo $fields)"
alt=$(echo $fields | tr ' ' '|')
op='(==|!=|<=|>=|<|>)'
pat="(->|\.)($alt)\b[[:space:]]*$op[[:space:]]*-?[0-9]|[^[:alnum:]_.][0-9]+[[:space:]]*$op[[:space:]]*[[:alnum:]_().]*(->|\.)($alt)\b"
# The pattern finds what it must (a check that cannot fail proves nothing).
for bad in 'if (s->ha == 1)' 'x = env->qp_method != 0;' 'if (3 == ah_env_settings()->ha)'; do
  echo "$bad" | grep -Eq "$pat" || fail "the pattern misses '$bad'"
done
echo 'if (s->ha == AH_HA_POLICY_PATH)' | grep -Eq "$pat" && fail "the pattern flags a comparison by name"
# And each name is its choice's index: AH_HA_POLICY_PORT = 2 because "port" is third in off|path|port|nic.
header=$(dirname "$table")/ah_env.h
for pair in AUTOHA_MODE:AH_MODE_ AUTOHA_HA:AH_HA_POLICY_ AUTOHA_QP_METHOD:AH_QP_METHOD_ \
            AUTOHA_HEALTH_ACTION:AH_HEALTH_ACTION_; do
  var=${pair%%:*} prefix=${pair#*:}
  choices=$(awk -v q="{\"$var\"," 'index($0, q) { on = 1 } on && /FIELD/ { print; exit }' "$table" |
            grep -o '"[a-z0-9|]*", FIELD' | cut -d'"' -f2 || true)
  [ -n "$choices" ] || fail "no choices found for $var in $table"
  i=0
  for c in ${choices//|/ }; do
    grep -q "\b$prefix${c^^} = $i\b" "$header" || fail "$var's choice '$c' is not $prefix${c^^} = $i in $header"
    i=$((i + 1))
  done
done
# Product code: every C file but the tests', the simulator's (it reads no setting) and the build's.
hits=$(find "$src" \( -name build -o -name 'build-*' -o -name tests -o -name sim \
            -o -name fuzz -o -name bench -o -name .git \) -prune -o \( -name '*.c' -o -name '*.h' \) -print |
       xargs grep -nE "$pat" || true)
[ -z "$hits" ] || fail "an enum setting compared with a bare number (use its AH_* name from ah_env.h):
$hits"
echo "PASS: no bare-number comparison of the enum settings ($(echo $fields)) in product code"
