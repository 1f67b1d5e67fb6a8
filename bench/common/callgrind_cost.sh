# callgrind_cost.sh: what bench/ha_cost and bench/link_cost share to turn a callgrind profile of a
# verbs layer's post and poll wrappers over sim/'s provider into instructions per work request.
# Sourced by their run scripts:
#   cg_require NAME   valgrind and callgrind_annotate are installed, or "NAME: ... FAILED", exit 1
#   cg_cost PROFILE POST POLL POST_CALLERS POLL_CALLERS
#                     sets wrs, polls, per_post, per_poll and total (see below); returns 1 when the
#                     wrappers or the provider's calls are missing from the profile
#   cg_at_most FIGURE BAR   whether FIGURE <= BAR (decimals)

cg_require() { # NAME: the bench's name, which its lines start with
  command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
    { echo "$1: valgrind (callgrind) is not installed"; echo "$1: FAILED"; exit 1; }
}

# "<incl> (<pct>)  *  <file>:<fn> [...]" is a function; the "  >  " lines under it are its callees.
# A function's cost is what its callers see (the "  >  " lines naming it under other functions: a
# function callgrind splits by source file calls its own parts), and a layer's poll wrapper is one
# function per context slot (ha_poll_cq_0, _1, ...): every matching name is summed.
cg_fn_incl() { # function-pattern: the inclusive count its callers see, summed
  awk -v f="^($1)\$" '
    function name(l) { sub(/ \(([0-9,]+)x\).*$/, "", l); sub(/ \[.*$/, "", l); sub(/.*:/, "", l); return l }
    /\*  / {caller = name($0); next}
    />   / && name($0) ~ f && caller !~ f {x = $1; gsub(",", "", x); s += x; got = 1}
    END {if (got) print s}' <<<"$cg_tree"
}
cg_callee() { # caller-pattern callee-pattern: "inclusive calls" of the callee under the callers, summed
  awk -v f="^($1)\$" -v c="^($2)\$" '
    function name(l) { sub(/ \(([0-9,]+)x\).*$/, "", l); sub(/ \[.*$/, "", l); sub(/.*:/, "", l); return l }
    /\*  / {in_ = name($0) ~ f; next}
    in_ && />   / && name($0) ~ c {x = $1; gsub(",", "", x); s += x; match($0, /\(([0-9,]+)x\)/);
      n = substr($0, RSTART + 1, RLENGTH - 3); gsub(",", "", n); k += n; got = 1}
    END {if (got) print s, k}' <<<"$cg_tree"
}

# cg_cost PROFILE POST POLL POST_CALLERS POLL_CALLERS: POST and POLL name the layer's post_send and
# poll_cq wrappers (patterns), POST_CALLERS and POLL_CALLERS every function of the layer that calls
# the provider's vb_post_send or vb_poll_cq (the wrappers and their slow paths). From callgrind's
# inclusive counts:
#   per_post  (POST - the provider's post_send it calls) / wrs, the WRs posted
#   per_poll  (POLL - the provider's poll_cq it calls) / wrs   (polls: the provider's polls, empty
#             ones included)
#   total     per_post + per_poll, each with one decimal
cg_cost() {
  local post poll pline qline ppost ppoll
  cg_tree=$(callgrind_annotate --tree=calling --inclusive=yes --threshold=100 "$1" 2>/dev/null)
  post=$(cg_fn_incl "$2") poll=$(cg_fn_incl "$3")
  pline=$(cg_callee "$4" 'vb_post_send')
  qline=$(cg_callee "$5" 'vb_poll_cq')
  [ -n "$post" ] && [ -n "$poll" ] && [ -n "$pline" ] && [ -n "$qline" ] || return 1
  read -r ppost wrs <<<"$pline"
  read -r ppoll polls <<<"$qline"
  read -r per_post per_poll total < <(awk -v a="$post" -v b="$ppost" -v c="$poll" -v d="$ppoll" -v n="$wrs" \
    'BEGIN {p = (a - b) / n; q = (c - d) / n; printf "%.1f %.1f %.1f\n", p, q, p + q}')
}

cg_at_most() { awk -v t="$1" -v b="$2" 'BEGIN {exit !(t <= b)}'; }
