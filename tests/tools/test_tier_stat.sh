#!/bin/sh
# tier-stat's contract as a command: exit codes, where messages go, and the
# FILE:LINE:COL: form of manifest errors.  $1 is the tier-stat binary, $2
# meson's buildtype, $3 the fault_sites option, $4 tests/commit_tool (makes
# durable stores for --check-files; its cases are skipped without it).
set -u
TS=$1
T=$(mktemp -d "${TIER_TEST_TMPDIR:-/tmp}/ts-XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
pass=0

check() { # name expected-rc command...
	name=$1; want=$2; shift 2
	"$@" >"$T/out" 2>"$T/err"
	rc=$?
	if [ "$rc" -ne "$want" ]; then
		echo "FAIL: $name: exit $rc, expected $want"; sed 's/^/  stderr: /' "$T/err"
		fail=$((fail + 1))
		return 1
	fi
	pass=$((pass + 1))
	return 0
}

grep_in() { # name file pattern
	if ! grep -q -e "$3" "$2"; then
		echo "FAIL: $1: '$3' not in $2:"; sed 's/^/  /' "$2"
		fail=$((fail + 1))
	else
		pass=$((pass + 1))
	fi
}

export TIER_DATA="$T/data"

check "version" 0 "$TS" --version && grep_in "version" "$T/out" "tier-stat (tierstore)"
cp "$T/out" "$T/out.version"
# A release build never carries fault sites (an environment variable could
# fail a production run); a debug build with tests has them, unless told.
# $2: meson's buildtype, $3: the fault_sites option.
case "${2:-}:${3:-auto}" in
release:auto | minsize:auto | plain:auto | *:disabled) want_faults=no ;;
debug:auto | debugoptimized:auto | *:enabled) want_faults=yes ;;
*) want_faults= ;;
esac
[ -z "$want_faults" ] || grep_in "fault sites in a ${2:-} build" "$T/out" "fault_sites=$want_faults"
check "help" 0 "$TS" --help && grep_in "help" "$T/out" "usage:"
# A CUDA build on a machine without a driver says so plainly, not with the
# CUDA runtime's "driver version is insufficient" (issue 16).
if grep -q "cuda=yes" "$T/out.version" 2>/dev/null && ! ldconfig -p 2>/dev/null | grep -q "libcuda.so.1 "; then
	check "--gpu-selftest without a driver" 1 "$TS" --gpu-selftest 0
	grep_in "--gpu-selftest without a driver" "$T/err" "no GPU: no CUDA driver found"
	check "--check without a driver" 0 "$TS" --check
	grep_in "--check without a driver" "$T/out" "auto: no GPU (no CUDA driver found"
fi
mkdir -p "$T/stats"
check "no arguments lists the stores" 0 env TIER_STATS_DIR="$T/stats" "$TS" && \
	grep_in "no arguments: empty list" "$T/out" "no running stores in $T/stats"
check "--dir missing" 1 "$TS" --dir "$T/no-such-dir" && grep_in "--dir missing" "$T/err" "$T/no-such-dir"
check "-c without -w" 2 "$TS" -c 3
check "--json with --prometheus" 2 "$TS" --json --prometheus
check "--remove-stale with a pid" 2 "$TS" --remove-stale 1
check "live options with --check" 2 "$TS" --check --json
check "a pid that has no store" 1 "$TS" --dir "$T/stats" 2147483646 && \
	grep_in "no store" "$T/err" "has no open store"
check "unknown option" 2 "$TS" --bogus
check "options table" 0 "$TS" --options && grep_in "options" "$T/out" "TIER_LOG_SUBSYS"
check "print default" 0 "$TS" --print-default && grep_in "print default" "$T/out" "$T/data"

check "check default" 0 "$TS" --check
grep_in "check default: YAML out" "$T/out" "^dram:"
grep_in "check default: bytes" "$T/out" "capacity: [0-9][0-9]*"
[ ! -e "$T/data" ] || { echo "FAIL: --check created the data directory"; fail=$((fail + 1)); }

# The effective configuration is itself a valid manifest.
cp "$T/out" "$T/effective.yaml"
check "effective config re-checks" 0 "$TS" --check "$T/effective.yaml"

for ex in "$TIER_EXAMPLES"/*.yaml; do
	[ -e "$ex" ] || continue
	mkdir -p "$T/n0" "$T/n1" "$T/n2" "$T/n3"
	check "example $(basename "$ex")" 0 env TIER_NVME0="$T/n0" TIER_NVME1="$T/n1" \
		TIER_NVME2="$T/n2" TIER_NVME3="$T/n3" "$TS" --check "$ex"
done

cat >"$T/typo.yaml" <<'YAML'
version: 1
name: t
gpu:
  device: none
dram:
  capacity: 512MiB
  capacty: 1GiB
YAML
check "misspelled key" 2 "$TS" --check "$T/typo.yaml"
grep_in "misspelled key: position" "$T/err" "^$T/typo.yaml:7:3: "
grep_in "misspelled key: suggestion" "$T/err" "did you mean 'capacity'?"
[ ! -s "$T/out" ] || { echo "FAIL: misspelled key: stdout not empty"; fail=$((fail + 1)); }

printf 'dram: [1, 2\n' >"$T/syntax.yaml"
check "syntax error" 2 "$TS" --check "$T/syntax.yaml"
grep_in "syntax error: position" "$T/err" "^$T/syntax.yaml:2:1: YAML syntax error"

# One file per error class of the manifest: exit 2, FILE:LINE:COL: first.
# What may not stand at a backing path (--check says what an open would).
mkdir -p "$T/d"
: >"$T/d/victim"
ln -s "$T/d/victim" "$T/d/link"
ln -s /etc "$T/d/etc-link"
mkfifo "$T/d/fifo"
printf 'root:x:0:0::/root:/bin/sh\n' >"$T/d/passwd"
n=0
while IFS='|' read -r pos needle body; do
	n=$((n + 1))
	printf '%b' "$body" | sed "s|@D@|$T/d|g" >"$T/e$n.yaml"
	check "error class $n ($needle)" 2 "$TS" --check "$T/e$n.yaml"
	grep_in "error class $n: position" "$T/err" "^$T/e$n.yaml:$pos: "
	grep_in "error class $n: message" "$T/err" "$needle"
done <<'CASES'
7:3|did you mean 'capacity'|version: 1\nname: t\ngpu:\n  device: none\ndram:\n  capacity: 512MiB\n  capacty: 1GiB\n
2:13|expected a size|dram:\n  capacity: [1]\n
2:13|bad unit|dram:\n  capacity: 5GB2\n
2:13|bad unit in '64Gib' (accepted units: B, K, KiB|dram:\n  capacity: 64Gib\n
2:13|negative size|dram:\n  capacity: -1GiB\n
2:13|greater than zero|dram:\n  capacity: 0\n
6:14|duplicate path|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - {path: @D@/, capacity: 1MiB}\n    - {path: @D@/., capacity: 1MiB}\n
2:13|MemAvailable|dram:\n  capacity: 1PiB\n
6:17|free space|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/\n      capacity: 100PiB\n
5:13|does not exist|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/missing/x.dat\n      capacity: 1MiB\n
5:13|is a symbolic link|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/link\n      capacity: 1MiB\n
5:13|is a symbolic link|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/etc-link\n      capacity: 1MiB\n
5:13|is a FIFO|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/fifo\n      capacity: 1MiB\n
5:13|not a tierstore backing file|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/passwd\n      capacity: 1MiB\n
3:1|YAML syntax error|dram:\n  capacity: [1\n
5:13|is a symbolic link (to '/etc'); name the real directory|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/etc-link/\n      capacity: 1MiB\n
1:7|name: contains a NUL byte at offset 1|name: "a\\0b"\ndram:\n  capacity: 512MiB\n
6:17|capacity: 18446744073709551615 B (16.00 EiB) is larger than|dram:\n  capacity: 512MiB\nnvme:\n  paths:\n    - path: @D@/\n      capacity: 18446744073709551615B\n
3:4|YAML aliases expand|a: &a [x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n
CASES

check "missing file" 2 "$TS" --check "$T/absent.yaml"
grep_in "missing file: message" "$T/err" "absent.yaml: No such file or directory"

# Not a regular file: refused at once, never read (a FIFO would block, /dev/zero never end).
mkfifo "$T/fifo.yaml"
check "FIFO as the manifest" 2 timeout 10 "$TS" --check "$T/fifo.yaml"
grep_in "FIFO: message" "$T/err" "fifo.yaml: is a FIFO (named pipe); a manifest must be a regular file"
check "/dev/zero as the manifest" 2 timeout 10 "$TS" --check /dev/zero
grep_in "/dev/zero: message" "$T/err" "/dev/zero: is a character device; a manifest must be a regular file"

# 1 MiB of nested flow mappings: refused by depth in well under 10 s.
head -c 1048576 /dev/zero | tr '\0' '{' >"$T/deep.yaml"
check "deep nesting at the size cap" 2 timeout 10 "$TS" --check "$T/deep.yaml"
grep_in "deep nesting: message" "$T/err" "deep.yaml:1:34: YAML nesting deeper than 32 levels (the limit); refused"

# An escape sequence in a value is shown escaped, not sent to the terminal.
printf 'name: "a\\e[2Jb"\n' >"$T/esc.yaml"
check "escape sequence in a value" 2 "$TS" --check "$T/esc.yaml"
grep_in "escape: shown escaped" "$T/err" "name: 'a.x1b\[2Jb' is not a valid store name"
if grep -q "$(printf '\033')" "$T/err"; then
	echo "FAIL: an ESC byte reached stderr"; fail=$((fail + 1))
fi

printf '{}\n' >"$T/env.yaml"
check "TIER_MANIFEST used when no file is given" 0 env TIER_MANIFEST="$T/env.yaml" "$TS" --check
grep_in "TIER_MANIFEST: source" "$T/out" "effective configuration of $T/env.yaml"

check "invalid TIER_LOG warns and keeps the default" 0 env TIER_LOG=loud "$TS" --version
grep_in "invalid TIER_LOG" "$T/err" "invalid TIER_LOG='loud'"

check "TIER_LOG=debug prints the options table" 0 env TIER_LOG=debug "$TS" --version
grep_in "TIER_LOG=debug" "$T/err" "TIER_NVME_MAX"

# --remove-stale: a benchmark killed mid-run leaves its scratch backing file;
# a segment creation that did not finish, its temporary file.
TB=$(dirname "$TS")/tier-bench
mkdir -p "$T/stale" "$T/stats2"
cat >"$T/stale.yaml" <<YAML
name: killed
gpu:
  device: none
dram:
  capacity: 256MiB
nvme:
  paths:
    - path: $T/stale/
      capacity: 1GiB
YAML
: >"$T/stats2/.tierstore-2147483646-0.tmp"
"$TB" io --manifest "$T/stale.yaml" --size 512MiB --mix 0.5 >/dev/null 2>&1 &
bench=$!
# until the file is there or the run ended without it, however long a
# loaded machine takes to get that far (not a fixed 10 s, after which the
# check below was silently skipped)
while [ ! -e "$T/stale/tierstore-killed.dat" ] && kill -0 $bench 2>/dev/null; do sleep 0.05; done
kill -9 $bench
wait $bench 2>/dev/null
if [ -e "$T/stale/tierstore-killed.dat" ]; then
	check "--remove-stale" 0 env TIER_MANIFEST="$T/stale.yaml" "$TS" --dir "$T/stats2" --remove-stale
	grep_in "--remove-stale: scratch file" "$T/out" "removed $T/stale/tierstore-killed.dat (backing file of scratch store 'killed', process $bench gone)"
	grep_in "--remove-stale: tmp file" "$T/out" "removed $T/stats2/.tierstore-2147483646-0.tmp"
	[ ! -e "$T/stale/tierstore-killed.dat" ] || { echo "FAIL: --remove-stale left the file"; fail=$((fail + 1)); }
	check "--remove-stale again" 0 env TIER_MANIFEST="$T/stale.yaml" "$TS" --dir "$T/stats2" --remove-stale
	grep_in "--remove-stale again" "$T/out" "no stale backing files"
else
	echo "FAIL: tier-bench io never made its backing file"; fail=$((fail + 1))
fi

# --check-files: a closed durable store's files verified offline.  The
# data area starts at 64 KiB for a 64 KiB stripe unit (docs/nvme-format.md),
# and obj0, created first and never rewritten, holds its first unit.
CT=${4:-}
if [ -n "$CT" ] && [ -x "$CT" ]; then
	mkdir -p "$T/cf" "$T/cfstats"
	cat >"$T/cf.yaml" <<YAML
name: checked
gpu:
  device: none
dram:
  capacity: 64MiB
nvme:
  stripe_unit: 64KiB
  checksum: crc32c
  direct: false
  paths:
    - path: $T/cf/
      capacity: 64MiB
YAML
	F="$T/cf/tierstore-checked.dat"
	check "commit_tool: 3 objects, 2 commits" 0 env TIER_STATS=off "$CT" "$T/cf.yaml" 3 2
	check "--check-files: sound" 0 "$TS" --check-files "$F"
	grep_in "--check-files: sound: summary" "$T/out" "store 'checked' (1 file): generation 2 (.*), 2 of 2 kept commits sound, 2 reachable (2, 1), 3 objects"
	grep_in "--check-files: sound: units" "$T/out" "8 verified, 0 bad, 0 unchecked; sound$"
	if grep -q "PROBLEM" "$T/out"; then
		echo "FAIL: --check-files: sound: a PROBLEM line"; fail=$((fail + 1))
	fi
	cp "$F" "$T/cf.orig"
	flip() { # file offset: one byte changed in place
		printf '\125' | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
	}
	flip "$F" 65546
	check "--check-files: a flipped data byte" 1 "$TS" --check-files "$F"
	grep_in "--check-files: data: the unit" "$T/out" "^PROBLEM: generation 2: object 'obj0' stripe unit 0 (nvme0 file offset 65536, 65536 bytes): crc32c [0-9a-f]*, expected [0-9a-f]*$"
	grep_in "--check-files: data: summary" "$T/out" "8 verified, 1 bad, 0 unchecked; PROBLEMS FOUND$"
	grep_in "--check-files: data: stderr" "$T/err" "1 problem(s) found in the files of store 'checked'"
	grep_in "--check-files: data: none reachable" "$T/out" "2 of 2 kept commits sound, 0 reachable, "
	cp "$T/cf.orig" "$F"
	# the newest commit's slot: slot (write number % 2), write 2 in slot 0
	flip "$F" 4200
	check "--check-files: the newest slot damaged" 1 "$TS" --check-files "$F"
	grep_in "--check-files: slot: named" "$T/out" "^PROBLEM: commit slot 0 (nvme0 file offset 4096): damaged"
	grep_in "--check-files: slot: the other used" "$T/out" "generation 1 (.*), 1 of 1 kept commit sound, 1 reachable (1), 3 objects"
	cp "$T/cf.orig" "$F"
	flip "$F" 8300
	check "--check-files: the older slot damaged" 1 "$TS" --check-files "$F"
	grep_in "--check-files: older slot: named" "$T/out" "^PROBLEM: commit slot 1 (nvme0 file offset 8192): damaged"
	grep_in "--check-files: older slot: newest verified" "$T/out" "generation 2 (.*), 2 of 2 kept commits sound"
	cp "$T/cf.orig" "$F"
	truncate -s 100000 "$F"
	check "--check-files: truncated" 1 "$TS" --check-files "$F"
	grep_in "--check-files: truncated" "$T/out" "^PROBLEM: .*truncated"
	cp "$T/cf.orig" "$F"
	check "--check-files: restored" 0 "$TS" --check-files "$F"
	# a store still open: its files are in use
	env TIER_STATS=off "$CT" "$T/cf.yaml" 3 1 hold >"$T/hold.out" 2>&1 &
	holder=$!
	# until it holds the store open (or died), however long that takes
	while ! grep -q "^holding" "$T/hold.out" 2>/dev/null && kill -0 $holder 2>/dev/null; do
		sleep 0.05
	done
	check "--check-files: in use" 1 "$TS" --check-files "$F"
	grep_in "--check-files: in use" "$T/err" "$F: in use by a running store"
	kill $holder
	wait $holder 2>/dev/null
	check "--check-files: missing file" 1 "$TS" --check-files "$T/cf/absent.dat"
	grep_in "--check-files: missing file" "$T/err" "$T/cf/absent.dat: No such file or directory"
	check "--check-files: not a store's file" 1 "$TS" --check-files "$T/cf.yaml"
	grep_in "--check-files: not a store's file" "$T/err" "$T/cf.yaml"
else
	echo "note: no commit_tool (\$4): --check-files on a durable store not tested"
fi
# The live view of a damaged segment and of one cut short (issue 41,
# items 4 and 5): copies of a running store's segment, under the store's
# pid, that no writer touches.  $PY checks that an output is UTF-8
# throughout (strict), and JSON where it says so.
PY=/usr/bin/python3
utf8_ok() { # name file [json|jsonl]
	if "$PY" - "$2" "${3:-}" <<'PYEOF'
import json, sys
data = open(sys.argv[1], 'rb').read()
text = data.decode('utf-8')  # strict
bad = [c for c in text if (ord(c) < 0x20 and c not in '\n\t') or 0x7f <= ord(c) < 0xa0]
if bad:
    sys.exit('control characters: %r' % bad[:8])
if sys.argv[2] == 'json':
    json.loads(text)
elif sys.argv[2] == 'jsonl':
    for line in text.splitlines():
        json.loads(line)
PYEOF
	then
		pass=$((pass + 1))
	else
		echo "FAIL: $1: not valid UTF-8${3:+ / $3}:"; sed 's/^/  /' "$2" | head -c 4000
		fail=$((fail + 1))
	fi
}
if [ -n "$CT" ] && [ -x "$CT" ] && [ -x "$PY" ]; then
	mkdir -p "$T/lv" "$T/lvstats" "$T/dmg" "$T/cut"
	cat >"$T/lv.yaml" <<YAML
name: live
gpu:
  device: none
dram:
  capacity: 64MiB
nvme:
  stripe_unit: 64KiB
  direct: false
  paths:
    - path: $T/lv/
      capacity: 64MiB
YAML
	env TIER_STATS_DIR="$T/lvstats" "$CT" "$T/lv.yaml" 1 1 hold >"$T/lvhold.out" 2>&1 &
	holder=$!
	i=0
	while ! grep -q "^holding" "$T/lvhold.out" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
	seg=$(ls "$T/lvstats"/tierstore-"$holder"-*.stats 2>/dev/null | head -n 1)
	# The copies: damaged (every string of the segment not UTF-8, the
	# fixed fields without their NUL), and pristine (to be cut short).
	if [ -n "$seg" ] && "$PY" - "$seg" "$T/dmg/tierstore-$holder-0.stats" "$T/pristine" "$T/lv" <<'PYEOF'
import os, struct, sys, time
src, dmg, pristine, lvdir = sys.argv[1:5]
for _ in range(200):  # a whole snapshot, published
    b = bytearray(open(src, 'rb').read())
    seq_off, pay_off, pay_size, man_off = struct.unpack_from('<QQQQ', b, 168)
    if struct.unpack_from('<Q', b, pay_off + 32)[0] and struct.unpack_from('<Q', b, seq_off)[0] % 2 == 0:
        break
    time.sleep(0.05)
else:
    sys.exit('no snapshot published')
def write(path, data):
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.fchmod(fd, 0o600)
    os.write(fd, bytes(data))
    os.close(fd)
write(pristine, b)
bad = b'\xff\xc3(\xed\xa0\x80"\\\x1b[2J\xf0\x9f\x98\xc0\xaf\xe2\x82\x7f\x9b\x01\n\t\xc2\x85'
end = pay_off + pay_size
b[96:96 + 63] = (bad * 3)[:63]  # the name: its NUL at byte 63 kept
for name in (b'dram\0', b'nvme\0'):  # each backend: 16 bytes, no NUL
    i = b.find(name, pay_off, end)
    assert i > 0, name
    b[i:i + 16] = (bad * 2)[:16]
f = (os.path.realpath(lvdir) + '/tierstore-live.dat').encode()
i = b.find(f, pay_off, end)  # the path's file: 256 bytes, no NUL
assert i > 0, f
b[i:i + 256] = (bad * 12)[:256]
mlen = struct.unpack_from('<I', b, 160)[0]
b[man_off:man_off + min(mlen, 64)] = (bad * 3)[:min(mlen, 64)]
write(dmg, b)
PYEOF
	then
		check "--json of a damaged segment" 0 "$TS" --dir "$T/dmg" --json "$holder"
		utf8_ok "--json of a damaged segment" "$T/out" json
		grep_in "--json of a damaged segment: replacement" "$T/out" '\\ufffd'
		"$PY" -c 'import json,sys; json.load(sys.stdin)' <"$T/out" || {
			echo "FAIL: --json of a damaged segment: json.load"; fail=$((fail + 1)); }
		check "-w --json of a damaged segment" 0 "$TS" --dir "$T/dmg" --json -w 0.1 -c 2 "$holder"
		utf8_ok "-w --json of a damaged segment" "$T/out" jsonl
		check "--json list with a damaged segment" 0 "$TS" --dir "$T/dmg" --json
		utf8_ok "--json list with a damaged segment" "$T/out" json
		check "report of a damaged segment" 0 "$TS" --dir "$T/dmg" "$holder"
		utf8_ok "report of a damaged segment" "$T/out"
		check "list with a damaged segment" 0 "$TS" --dir "$T/dmg"
		utf8_ok "list with a damaged segment" "$T/out"
		check "--prometheus of a damaged segment" 0 "$TS" --dir "$T/dmg" --prometheus
		utf8_ok "--prometheus of a damaged segment" "$T/out"
		grep_in "--prometheus of a damaged segment: backend" "$T/out" 'backend="[^"]*\\"'

		# Cut short under -w: a message and exit 1, never SIGBUS.
		for to in 100 0; do
			want=$(wc -c <"$T/pristine" | tr -d ' ')
			for fmt in "" --json; do
				rm -f "$T/cut"/*
				cp "$T/pristine" "$T/cut/tierstore-$holder-0.stats"
				chmod 0600 "$T/cut/tierstore-$holder-0.stats"
				rm -f "$T/w.out"
				timeout 30 "$TS" --dir "$T/cut" -w 0.1 $fmt "$holder" >"$T/w.out" 2>"$T/w.err" &
				w=$!
				i=0
				while [ ! -s "$T/w.out" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
				"$PY" -c 'import os, sys; os.truncate(sys.argv[1], int(sys.argv[2]))' \
					"$T/cut/tierstore-$holder-0.stats" "$to"
				wait $w
				rc=$?
				if [ "$rc" -ne 1 ]; then
					echo "FAIL: -w ${fmt:-text} on a segment cut to $to bytes: exit $rc, expected 1"
					sed 's/^/  stderr: /' "$T/w.err"
					fail=$((fail + 1))
				else
					pass=$((pass + 1))
				fi
				grep_in "-w ${fmt:-text}, cut to $to bytes: message" "$T/w.err" \
					"segment '$T/cut/tierstore-$holder-0.stats' shrank to $to bytes (want $want): the store was closed or damaged"
			done
		done
	else
		echo "FAIL: no segment of the holding store to copy"; fail=$((fail + 1))
	fi
	kill $holder
	wait $holder 2>/dev/null
else
	echo "note: no commit_tool (\$4) or no $PY: the live view of damaged segments not tested"
fi

check "--check-files without files" 2 "$TS" --check-files
grep_in "--check-files without files" "$T/err" "name the backing files"
check "--check-files with --json" 2 "$TS" --check-files --json x

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
