#!/bin/bash
cat > /app/ticket.sh <<'SH'
#!/bin/bash
usage='usage: ticket.sh [-h] [-u] [-n COUNT] [-p PREFIX] [-w WIDTH] [--] START'
die() { printf 'ticket.sh: %s\n' "$1" >&2; exit "${2:-2}"; }
count=1 prefix=TKT width=4 upper=0
while getopts ':hun:p:w:' opt; do
  case $opt in
    h) printf '%s\n' "$usage"; exit 0 ;;
    u) upper=1 ;;
    n) count=$OPTARG ;;
    p) prefix=$OPTARG ;;
    w) width=$OPTARG ;;
    :) die "option -$OPTARG needs a value" ;;
    *) die "unknown option: -$OPTARG" ;;
  esac
done
shift $((OPTIND - 1))
[[ $count =~ ^[0-9]{1,4}$ ]] && (( 10#$count >= 1 && 10#$count <= 1000 )) || die "invalid count: $count"
[[ $width =~ ^[0-9]{1,2}$ ]] && (( 10#$width >= 1 && 10#$width <= 12 )) || die "invalid width: $width"
[[ $prefix =~ ^[A-Za-z][A-Za-z0-9]*$ ]] || die "invalid prefix: $prefix"
(( $# == 0 )) && die "missing START"
(( $# > 1 )) && die "too many arguments"
[[ $1 =~ ^[0-9]{1,12}$ ]] || die "invalid start: $1"
start=$((10#$1)) count=$((10#$count)) width=$((10#$width))
(( upper )) && prefix=${prefix^^}
last=$((start + count - 1))
(( ${#last} > width )) && die "$last does not fit in $width digits" 3
for ((k = start; k <= last; k++)); do printf '%s-%0*d\n' "$prefix" "$width" "$k"; done
SH
chmod +x /app/ticket.sh
