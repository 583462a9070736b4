#!/bin/bash
# The documentation's relative links, checked: every link of README.md, CONTRIBUTING.md,
# CHANGELOG.md, docs/*.md and bench/results/README.md, and every path and page the man pages
# (man/*.in) name, must lead to a file of this tree; nothing may lead outside it.
#   test/pkg/check-links.sh [ROOT]     ROOT: the tree to check (default: this checkout)
# Markdown: [text](target) outside code blocks and code spans; http(s):/mailto: targets are
# not followed. A target's #anchor must be a heading of the target file (GitHub's rule: lower
# case, punctuation dropped, spaces to '-', a repeated heading gets -1, -2, ...).
# Man pages: a railnet page named as NAME(N) must exist as man/NAME.N.in; a path of the tree
# (docs/..., man/..., bench/..., test/..., tools/..., src/..., examples/..., scripts/...,
# include/..., ext-net/..., fuzz/..., debian/...) must exist; /usr/share/doc/railnet/FILE must
# be a file debian/railnet.docs ships.
# Prints one line per dead link, "FILE:LINE: TARGET: why", and a summary; exit status 0 when
# every link is alive, 1 otherwise, 2 on a usage error.
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -d "$root" ] || { echo "usage: $0 [ROOT]" >&2; exit 2; }
root=$(cd "$root" && pwd)
cd "$root" || exit 2
dead=0 links=0

bad() { echo "$1:$2: $3: $4"; dead=$((dead + 1)); }

# The anchors of a markdown file, one per line.
anchors() {
  awk '/^```/ { fence = !fence; next }
       !fence && /^#+ / {
         h = $0; sub(/^#+ +/, "", h); sub(/ +#* *$/, "", h); h = tolower(h)
         gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
         n = seen[h]++; print (n ? h "-" n : h)
       }' "$1"
}

# LINE<TAB>TARGET for every link of a markdown file, outside fenced blocks and code spans.
md_links() {
  awk '/^```/ { fence = !fence; next }
       fence || /^    / { next }
       { line = $0; gsub(/`[^`]*`/, "", line)
         while (match(line, /\]\([^)]*\)/)) {
           t = substr(line, RSTART + 2, RLENGTH - 3); sub(/ +"[^"]*"$/, "", t)
           print NR "\t" t; line = substr(line, RSTART + RLENGTH)
         } }' "$1"
}

# Is path P (relative to the tree's root) inside the tree? Prints the normalized path.
inside() {
  local p
  p=$(realpath -m "$root/$1")
  case "$p" in "$root"|"$root"/*) echo "${p#"$root"/}"; return 0 ;; esac
  return 1
}

check_md() {
  local f=$1 dir ln t path anchor rel
  dir=$(dirname "$f")
  while IFS=$'\t' read -r ln t; do
    links=$((links + 1))
    case "$t" in
      http://*|https://*|mailto:*) continue ;;
      '') bad "$f" "$ln" "(empty)" "a link without a target"; continue ;;
    esac
    path=${t%%#*}
    anchor=
    [ "$path" != "$t" ] && anchor=${t#*#}
    if [ -z "$path" ]; then
      rel=$f
    elif [ "${path#/}" != "$path" ]; then
      bad "$f" "$ln" "$t" "an absolute path (links must be relative to the file)"; continue
    elif ! rel=$(inside "$dir/$path"); then
      bad "$f" "$ln" "$t" "leads outside the repository"; continue
    elif [ ! -e "$rel" ]; then
      bad "$f" "$ln" "$t" "no such file ($rel)"; continue
    fi
    if [ -n "$anchor" ]; then
      case "$rel" in
        *.md) anchors "$rel" | grep -qxF -- "$anchor" ||
                bad "$f" "$ln" "$t" "no heading '#$anchor' in $rel" ;;
      esac
    fi
  done < <(md_links "$f")
}

check_man() {
  local f=$1 ln tok page sec doc
  # railnet's own pages named as NAME(N) (.BR NAME (N) too); roff comments are skipped
  while IFS=: read -r ln tok; do
    links=$((links + 1))
    tok=$(printf '%s' "$tok" | tr -d ' ()')
    page=${tok%[178]} sec=${tok#"$page"}
    [ -f "man/$page.$sec.in" ] || bad "$f" "$ln" "$page($sec)" "no man/$page.$sec.in"
  done < <(sed -e 's/\\-/-/g' -e 's/^\.\\".*//' "$f" | grep -noE '\brailnet(-[a-z]+)? ?\([178]\)')
  # paths of the tree, and the installed docs
  while IFS=: read -r ln tok; do
    tok=${tok#[^A-Za-z0-9_./]}
    links=$((links + 1))
    case "$tok" in
      ../*) bad "$f" "$ln" "$tok" "leads outside the repository" ;;
      /usr/share/doc/railnet/*)
        doc=${tok#/usr/share/doc/railnet/}
        grep -qxF -- "$doc" debian/railnet.docs 2>/dev/null || grep -qxF -- "${doc%%/*}" debian/railnet.docs 2>/dev/null ||
          bad "$f" "$ln" "$tok" "debian/railnet.docs does not ship $doc" ;;
      *) [ -e "$tok" ] || bad "$f" "$ln" "$tok" "no such file in the tree" ;;
    esac
  done < <(sed -e 's/\\-/-/g' -e 's/\\&//g' -e 's/\\f[BIRP]//g' -e 's/^\.\\".*//' "$f" |
           grep -noE '(^|[^A-Za-z0-9_./-])(/usr/share/doc/railnet/|\.\./)?(docs|man|bench|test|tools|src|examples|scripts|include|ext-net|fuzz|debian)/[A-Za-z0-9_./-]*[A-Za-z0-9_/]')
}

files=()
for f in README.md CONTRIBUTING.md CHANGELOG.md docs/*.md bench/results/README.md; do
  [ -f "$f" ] && files+=("$f")
done
for f in "${files[@]}"; do check_md "$f"; done
mans=(man/*.in)
for f in "${mans[@]}"; do [ -f "$f" ] && check_man "$f"; done

echo "check-links: ${#files[@]} markdown files, ${#mans[@]} man pages, $links links, $dead dead"
[ "$dead" -eq 0 ]
