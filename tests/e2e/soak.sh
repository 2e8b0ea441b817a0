# Sourced by tests/engine-suite for tests/soak-*.engine (and
# bench/run-soak-bench): run_soak TYPE SHARED_SOCKET
# The soak with faults (tests/e2e/soak.mjs) against an mcp-sandboxd of its own
# on the server's default limits: only what the harness must set is set (port
# 0, a unique server.instance, a state folder, the engine, the image,
# sandbox.disk=0 as in the e2e suite, API keys); server.* limits are untouched,
# so server.max_connections_per_ip is its default 64 and the 50 sessions all
# come from 127.0.0.1.
# The engine is a private one of this run (tests/private-engine: a dockerd
# with its own socket, data root and containerd, or a podman service on its
# own socket over the shared storage), which the node script stops and starts
# again mid-run: the shared engines other suites use at the same time are never
# touched (SHARED_SOCKET is only required to be there: the private dockerd's
# image is copied from it, the podman service shares its storage). On Podman
# the run's containers are labelled by the server's instance, which is
# registered with the private engine, so that its cleanup removes them.
# After the node script: the server stops on SIGTERM with status 0 and no
# container of the instance is left on the engine; then the private engine is
# cleaned up. Needs root (a private engine), node 20+, curl; else skipped
# (Bail out! under MCP_SANDBOX_REQUIRE_ENGINES=1).
# Knobs (the node script's): SBX_SOAK_SESSIONS (50), SBX_SOAK_SSE (10),
# SBX_SOAK_CALLS (10), SBX_SOAK_SHARED (4), SBX_SOAK_DOWN_CALLS (50);
# SBX_SOAK_TIMEOUT (seconds, 300) bounds the node run; SBX_SOAK_SETS: more
# --set words for the server (for debugging only); SBX_E2E_KEEP=1 keeps the
# temporary folder.
# shellcheck disable=SC1091,SC2034 # run.sh's functions read the e2e_* variables set here
. "${SBX_SRCDIR:-.}/tests/e2e/run.sh"

soak_cleanup() {
	soak_keep=${SBX_E2E_KEEP:-0}
	SBX_E2E_KEEP=1 e2e_cleanup # the server stopped, what it left removed
	if [ -n "${soak_pe_dir:-}" ] &&
		! bash "$srcdir/tests/private-engine" cleanup "$e2e_type" "$soak_pe_dir" >>"$soak_pe_log" 2>&1; then
		echo "# tests/private-engine cleanup $e2e_type $soak_pe_dir failed:"
		e2e_diag_file "$soak_pe_log"
	fi
	[ -n "${soak_pe_dir:-}" ] && soak_shims
	if [ -n "${e2e_tmp:-}" ] && [ "$soak_keep" != 1 ]; then
		rm -rf "$e2e_tmp"
	fi
}

# soak_shims: a containerd-shim of the private dockerd's run that outlived its
# cleanup (seen after each Docker run here: no process under it, its folder
# gone; tests/private-engine warns "containers of ... still run") is ended by
# PID. Its command line names this run's own containerd socket, a path no
# other process uses.
soak_shims() {
	for d in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) || continue
		case $cmd in
		*containerd-shim*" -address $soak_pe_dir/x/containerd/containerd.sock "*)
			echo "# a containerd-shim of the private dockerd outlived its cleanup: pid ${d#/proc/}, ended"
			kill -KILL "${d#/proc/}" 2>/dev/null
			;;
		esac
	done
}

# soak_proc FIELD: VmRSS (kB) or Threads of the server e2e_spid.
soak_proc() {
	sed -n "s/^$1:[[:space:]]*\([0-9]*\).*/\1/p" "/proc/$e2e_spid/status"
}
soak_fds() {
	find "/proc/$e2e_spid/fd" -mindepth 1 -maxdepth 1 | wc -l
}
# soak_fd_kinds: the server's descriptors by target, counted.
soak_fd_kinds() {
	for f in /proc/"$e2e_spid"/fd/*; do
		readlink "$f"
	done 2>/dev/null | sed 's/:\[[0-9]*\]$//; s|^/tmp/.*|/tmp/...|' | sort | uniq -c | tr -s ' ' | tr '\n' ';'
}

# soak_after: three TAP points: once every client has gone, the server's
# threads (within +SBX_SOAK_THREADS_SLACK, 8), RSS (+SBX_SOAK_RSS_SLACK_KB,
# 32 MiB) and open descriptors (+SBX_SOAK_FDS_SLACK, 48) are back near what
# they were before the first sandbox (the node script's "SOAK before" line).
# The descriptors' bound: the engine's REST client keeps up to 8 idle libcurl
# handles (backends/rest.c, REST_POOL_MAX), each with libcurl's cache of up to
# 5 connections, which a busy run fills (about +20 seen after 1,000-5,000
# calls); a leak grows past it. Bounds, not times: it waits up to 30 s for
# them to be within, then checks.
soak_after() {
	# shellcheck disable=SC2046,SC2154 # three numbers; e2e_ntap is e2e_node's
	set -- $(sed -n 's/^# SOAK before \([0-9]*\) \([0-9]*\) \([0-9]*\)$/\1 \2 \3/p' "$e2e_ntap")
	b_rss=${1:-} b_thr=${2:-} b_fds=${3:-}
	if [ -z "$b_fds" ]; then
		n=$((n + 1))
		echo "not ok $n - the server's threads, RSS and descriptors come back (no figures from before)"
		return
	fi
	s_thr=${SBX_SOAK_THREADS_SLACK:-8} s_rss=${SBX_SOAK_RSS_SLACK_KB:-32768} s_fds=${SBX_SOAK_FDS_SLACK:-48}
	asan=0
	grep -aq __asan_init "$server" 2>/dev/null && asan=1 s_rss=1073741824 # see below
	i=0
	while :; do
		a_rss=$(soak_proc VmRSS) a_thr=$(soak_proc Threads) a_fds=$(soak_fds)
		if [ "$a_thr" -le $((b_thr + s_thr)) ] && [ "$a_rss" -le $((b_rss + s_rss)) ] &&
			[ "$a_fds" -le $((b_fds + s_fds)) ]; then
			break
		fi
		[ $i -ge 60 ] && break
		sleep 0.5
		i=$((i + 1))
	done
	echo "# SOAK after $a_rss $a_thr $a_fds"
	n=$((n + 1))
	if [ "$a_thr" -le $((b_thr + s_thr)) ]; then
		echo "ok $n - the server's threads come back within +$s_thr of the start ($b_thr -> $a_thr)"
	else
		echo "not ok $n - the server's threads come back within +$s_thr of the start ($b_thr -> $a_thr)"
	fi
	n=$((n + 1))
	if [ $asan = 1 ]; then
		# ASan's quarantine keeps freed memory (up to 256 MiB by default): RSS
		# says nothing there; LeakSanitizer checks the heap at the exit.
		echo "ok $n - the server's RSS comes back near the start ($b_rss -> $a_rss kB) # SKIP built with AddressSanitizer"
	elif [ "$a_rss" -le $((b_rss + s_rss)) ]; then
		echo "ok $n - the server's RSS comes back within +$((s_rss / 1024)) MiB of the start ($b_rss -> $a_rss kB)"
	else
		echo "not ok $n - the server's RSS comes back within +$((s_rss / 1024)) MiB of the start ($b_rss -> $a_rss kB)"
	fi
	n=$((n + 1))
	if [ "$a_fds" -le $((b_fds + s_fds)) ]; then
		echo "ok $n - the server's open descriptors come back within +$s_fds of the start ($b_fds -> $a_fds)"
	else
		echo "not ok $n - the server's open descriptors come back within +$s_fds of the start ($b_fds -> $a_fds)"
		sed -n 's/^# SOAK fds-before /#   before: /p' "$e2e_ntap"
		echo "#   after: $(soak_fd_kinds)"
		if command -v ss >/dev/null 2>&1; then
			echo "#   the server's sockets (ss), by kind, state and peer:"
			{
				ss -tanpH 2>/dev/null | grep "pid=$e2e_spid," | awk '{ print "tcp", $1, $4, "->", $5 }'
				ss -xapH 2>/dev/null | grep "pid=$e2e_spid," | awk '{ print "unix", $2, $5 }'
			} | sed 's/:[0-9]* ->/ ->/' | sort | uniq -c | head -n 20 | sed 's/^/#     /'
		fi
	fi
}

# soak_server_start NAME: mcp-sandboxd on the private engine with only what
# the harness needs (and a pool of 2 that does not grow, as its figures were
# taken with: grown to 16 by the soak's bursts, its removal at the stop took
# the stop past server.stop_timeout on a loaded private engine in ci36);
# sets e2e_spid, e2e_url, e2e_slog.
soak_server_start() {
	e2e_sout=$e2e_tmp/$1.out
	e2e_slog=$e2e_tmp/$1.err
	# shellcheck disable=SC2086 # SBX_SOAK_SETS is words
	"$server" -c "$srcdir/etc/mcp-sandbox.ini" \
		--set engine.type="$e2e_type" \
		--set engine.socket="unix://$e2e_sock" \
		--set server.listen=127.0.0.1 \
		--set server.port=0 \
		--set server.instance="$instance" \
		--set server.state_dir="$e2e_tmp/state" \
		--set sandbox.image="${MCP_SANDBOX_IMAGE:-localhost/mcp-sandbox:latest}" \
		--set sandbox.disk=0 \
		--set sandbox.upload_dir="$e2e_tmp/upload" \
		--set auth.keys_file="$e2e_keys" \
		--set sandbox.pool_size=2 --set sandbox.pool_max=2 \
		${SBX_SOAK_SETS:-} >"$e2e_sout" 2>"$e2e_slog" </dev/null &
	e2e_spid=$!
	e2e_started=1
	i=0
	while :; do
		e2e_url=$(sed -n 's|^mcp-sandboxd: listening on \(http://[^ ]*\).*|\1|p' "$e2e_sout" 2>/dev/null | head -n 1)
		[ -n "$e2e_url" ] && return 0
		if [ $i -ge 600 ] || ! kill -0 "$e2e_spid" 2>/dev/null; then
			echo "# mcp-sandboxd printed:"
			e2e_diag_file "$e2e_sout"
			e2e_diag_file "$e2e_slog"
			return 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
}

run_soak() {
	e2e_type=$1
	shared_sock=$2
	srcdir=${SBX_SRCDIR:-.}
	builddir=${SBX_BUILDDIR:-.}
	[ -n "$shared_sock" ] && [ -S "$shared_sock" ] || e2e_skip "no $e2e_type engine (run tools/provision-engines)"
	[ "$(id -u)" -eq 0 ] || e2e_skip "a private $e2e_type engine needs root"
	e2e_need_tools "the soak"

	instance=soak-$e2e_type-$$-$(date +%s)
	# What e2e_node passes on and the soak does not use.
	gateway='' max_body='' origin='' e2e_key_bob='' e2e_spid='' e2e_npid='' e2e_ipid='' e2e_cpid='' e2e_started=''
	e2e_tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbx-soak-$e2e_type.XXXXXX") || {
		echo "Bail out! mktemp failed"
		exit 1
	}
	trap soak_cleanup EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM

	e2e_npm_modules
	mkdir -p "$e2e_tmp/suite" "$e2e_tmp/upload" "$e2e_tmp/state"
	chmod 700 "$e2e_tmp/state"
	cp "$srcdir"/tests/e2e/*.mjs "$e2e_tmp/suite/" && ln -s "$mods" "$e2e_tmp/suite/node_modules" || {
		echo "Bail out! cannot set up $e2e_tmp/suite"
		exit 1
	}

	# The private engine: its folder is short (unix socket paths under it).
	soak_pe_log=$e2e_tmp/private-engine.log
	SBX_PRIVATE_ENGINE_OWNER=$$
	export SBX_PRIVATE_ENGINE_OWNER
	soak_pe_dir=$(mktemp -d /tmp/sbx-soak.XXXXXX) || {
		echo "Bail out! mktemp failed"
		exit 1
	}
	t0=$(date +%s)
	if ! e2e_sock=$(bash "$srcdir/tests/private-engine" start "$e2e_type" "$soak_pe_dir" 2>>"$soak_pe_log"); then
		e2e_diag_file "$soak_pe_log"
		echo "Bail out! the private $e2e_type engine did not start (tests/private-engine)"
		exit 1
	fi
	if ! bash "$srcdir/tests/private-engine" label "$e2e_type" "$soak_pe_dir" "org.mcp-sandbox.instance=$instance" 2>>"$soak_pe_log"; then
		e2e_diag_file "$soak_pe_log"
		echo "Bail out! tests/private-engine label failed"
		exit 1
	fi
	echo "# private $e2e_type engine at $e2e_sock (up in $(($(date +%s) - t0)) s)"

	e2e_keys=$e2e_tmp/keys
	e2e_key=$("$server" -c "$srcdir/etc/mcp-sandbox.ini" --set auth.keys_file="$e2e_keys" \
		keys add alice 2>"$e2e_tmp/keys.err" </dev/null)
	case $e2e_key in
	msk_*) ;;
	*)
		e2e_diag_file "$e2e_tmp/keys.err"
		echo "Bail out! mcp-sandboxd keys add alice printed no key"
		exit 1
		;;
	esac

	if ! soak_server_start server; then
		echo "Bail out! mcp-sandboxd did not start (no 'listening on' line)"
		exit 1
	fi
	echo "# server $e2e_url (pid $e2e_spid), instance $instance, default server limits$(
		[ -n "${SBX_SOAK_SETS:-}" ] && echo " EXCEPT $SBX_SOAK_SETS")"

	limit=
	command -v timeout >/dev/null 2>&1 && limit="timeout -k 10 ${SBX_SOAK_TIMEOUT:-300}"
	n=0
	SBX_SOAK_PID=$e2e_spid SBX_SOAK_PRIVATE_ENGINE=$srcdir/tests/private-engine SBX_SOAK_PRIVATE_DIR=$soak_pe_dir
	export SBX_SOAK_PID SBX_SOAK_PRIVATE_ENGINE SBX_SOAK_PRIVATE_DIR
	t0=$(date +%s)
	e2e_node soak "the soak" "$e2e_tmp/suite/soak.mjs"
	echo "# the soak ran for $(($(date +%s) - t0)) s"
	soak_after
	e2e_server_stop mcp-sandboxd
	e2e_none_left "no container of the instance is left on the engine"
	echo "1..$n"
}
