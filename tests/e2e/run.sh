# Sourced by tests/e2e-*.engine (tests/engine-suite):
#   run_e2e TYPE SOCKET
# Starts the test package index (tests/pkgindex.py) and its own mcp-sandboxd
# (port 0, a unique server.instance, sandbox.network=host, temporary upload and
# state folders, server.max_body=64k, one allowed Origin) against the engine at SOCKET, runs the
# node suite (tests/e2e/run.mjs: the official MCP SDK client and
# supergateway), stops both by PID, and checks that no container with the
# instance label is left. Every server runs with API keys (auth.keys_file: a
# file made 0600 in the temporary folder by `mcp-sandboxd keys add`): tenant
# alice's key is sent by every client of the suite, tenant bob's is for
# tests/e2e/tenants.mjs. Then the adoption phase (e2e_adopt): a server with
# sandbox.remove_on_exit=false is stopped by SIGTERM and leaves its sandbox,
# which the next server on the same instance and state folder adopts
# (tests/e2e/adopt.mjs). Before the first server stops, a second one on its
# instance and state folder must refuse to start. Then the stop with calls in
# flight (e2e_shutdown: SIGTERM, a call that ignores its cancellation, a second
# SIGTERM). Prints TAP; the plan comes last.
#
# Without the engine, node or the npm packages the test is skipped, unless
# MCP_SANDBOX_REQUIRE_ENGINES=1 (then Bail out!). SBX_E2E_KEEP=1 keeps the
# temporary folder; SBX_E2E_ONLY=seed,gateway,http,outside,resources,upload,bad,timeout,many,slow,flood,tenants,adopt,shutdown
# runs a subset; SBX_E2E_TIMEOUT (seconds, default 900) bounds each node run.
# The npm packages come from tools/e2e-deps (tests/e2e/node_modules after a
# `cd tests/e2e && npm ci`, else a cache keyed by package-lock.json).
# By hand: SBX_SRCDIR=$PWD SBX_BUILDDIR=BUILD sh tests/engine-suite e2e-docker
# The engine sockets, as the engine tests find them.
# shellcheck disable=SC1091
. "${SBX_SRCDIR:-.}/tests/engine-env.sh"

e2e_skip() {
	if [ "${MCP_SANDBOX_REQUIRE_ENGINES:-0}" = 1 ]; then
		echo "Bail out! $*"
		exit 1
	fi
	echo "1..0 # SKIP $*"
	exit 0
}

e2e_diag_file() { # FILE [LINES]: its tail as TAP diagnostics
	[ -s "$1" ] && tail -n "${2:-20}" "$1" | sed 's/^/#   /'
}

# e2e_gone PID TENTHS: waits up to TENTHS/10 s for PID to end; 1 if it did not.
e2e_gone() {
	i=0
	while kill -0 "$1" 2>/dev/null; do
		[ $i -lt "$2" ] || return 1
		sleep 0.1
		i=$((i + 1))
	done
}

e2e_cleanup() {
	if [ -n "${e2e_npid:-}" ]; then # interrupted while node ran
		kill -TERM "$e2e_npid" 2>/dev/null
		e2e_gone "$e2e_npid" 100 || kill -KILL "$e2e_npid" 2>/dev/null
		cat "$e2e_ntap" 2>/dev/null
		echo "Bail out! interrupted"
	fi
	if [ -n "${e2e_cpid:-}" ]; then # a client of the stop phase
		kill -TERM "$e2e_cpid" 2>/dev/null
	fi
	if [ -n "${e2e_spid:-}" ] && kill -0 "$e2e_spid" 2>/dev/null; then
		kill -TERM "$e2e_spid" 2>/dev/null
		e2e_gone "$e2e_spid" 600 || kill -KILL "$e2e_spid" 2>/dev/null
	fi
	# Whatever a server left behind (killed, or stopped with
	# remove_on_exit=false): the instance is this run's own.
	if [ -n "${e2e_started:-}" ]; then
		e2e_remove "$e2e_sock" "$(e2e_containers "$e2e_type" "$e2e_sock" "$instance")"
	fi
	if [ -n "${e2e_ipid:-}" ]; then
		kill -TERM "$e2e_ipid" 2>/dev/null
		wait "$e2e_ipid" 2>/dev/null
	fi
	if [ -n "${e2e_tmp:-}" ] && [ "${SBX_E2E_KEEP:-0}" != 1 ]; then
		rm -rf "$e2e_tmp"
	fi
}

# e2e_containers TYPE SOCKET INSTANCE [LABEL=VALUE]: the ids of the
# instance's containers (those that also carry LABEL=VALUE); on a swarm,
# its services (a sandbox is one).
e2e_containers() {
	filters="{\"label\":[\"org.mcp-sandbox.instance=$3\"${4:+,\"$4\"}]}"
	case $1 in
	podman) url="http://d/v4.0.0/libpod/containers/json?all=true" ;;
	swarm) url="http://d/services" ;;
	*) url="http://d/containers/json?all=1" ;;
	esac
	json=$(curl -sSf --max-time 30 --unix-socket "$2" -G --data-urlencode "filters=$filters" "$url") || return 1
	printf '%s' "$json" | node -e '
		let s = ""; process.stdin.on("data", (d) => (s += d));
		process.stdin.on("end", () => { for (const c of JSON.parse(s)) console.log(c.Id || c.ID); });'
}

# e2e_count LINES: how many non-empty lines.
e2e_count() {
	printf '%s' "$1" | grep -c .
}

# e2e_remove SOCKET IDS: force-removes the containers IDS (left behind;
# the Docker-compatible route, which Podman serves too; a swarm's services).
e2e_remove() {
	for id in $2; do
		echo "#   removing container $id"
		if [ "${e2e_type:-}" = swarm ]; then
			curl -sS --max-time 60 --unix-socket "$1" -X DELETE "http://d/services/$id" >/dev/null
		else
			curl -sS --max-time 60 --unix-socket "$1" -X DELETE "http://d/containers/$id?force=1&v=1" >/dev/null
		fi
	done
}

# e2e_need_tools WHAT: node 20+ and curl (else the test is skipped, WHAT
# naming who needs them) and the built server; sets node and server from
# builddir.
e2e_need_tools() {
	node=$(command -v node) || e2e_skip "node is not installed ($1 needs Node.js 20+)"
	"$node" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
		e2e_skip "node $("$node" --version) is older than 20"
	command -v curl >/dev/null 2>&1 || e2e_skip "curl is not installed"
	server=$builddir/src/mcp-sandboxd
	if [ ! -x "$server" ]; then
		echo "Bail out! no $server (build first)"
		exit 1
	fi
}

# e2e_npm_modules: the folder of tests/e2e's npm packages in mods
# (tools/e2e-deps), else the test is skipped; its errors go to e2e_tmp.
e2e_npm_modules() {
	if ! mods=$(sh "$srcdir/tools/e2e-deps" "$srcdir" 2>"$e2e_tmp/deps.err"); then
		e2e_diag_file "$e2e_tmp/deps.err"
		e2e_skip "the npm packages of tests/e2e could not be installed (tools/e2e-deps)"
	fi
}

# e2e_want NAME: SBX_E2E_ONLY is unset or names NAME.
e2e_want() {
	[ -z "${SBX_E2E_ONLY:-}" ] && return 0
	case ",$SBX_E2E_ONLY," in
	*",$1,"*) return 0 ;;
	esac
	return 1
}

# e2e_server_start NAME [ARG...]: starts mcp-sandboxd with the suite's
# settings (a pool of 2: the default, 16, would hold 16 containers for each
# server of the suite), then $E2E_SETS (words: more --set, the suite's own), then ARGs
# (more --set; the last one wins), its output in
# $e2e_tmp/NAME.out and NAME.err; sets e2e_spid, e2e_url and e2e_slog.
# Status 1, with its output as diagnostics and the server stopped, when it
# printed no 'listening on' line within 60 s.
# Every client of the suite connects from 127.0.0.1, as clients behind a
# proxy do, on the default connection limits (server.max_connections_per_ip
# 512, an idle connection closed to let a new one in): the SDK clients' pools
# and streams (about 57 at once were counted here) must never be refused.
e2e_server_start() {
	e2e_sout=$e2e_tmp/$1.out
	e2e_slog=$e2e_tmp/$1.err
	shift
	# TLS for tcp:// endpoints (the swarm's TLS node), as the C suites get it.
	if [ -n "${MCP_SANDBOX_TLS_DIR:-}" ]; then
		set -- --set engine.tls_ca="$MCP_SANDBOX_TLS_DIR/ca.pem" \
			--set engine.tls_cert="$MCP_SANDBOX_TLS_DIR/cert.pem" \
			--set engine.tls_key="$MCP_SANDBOX_TLS_DIR/key.pem" "$@"
	fi
	# shellcheck disable=SC2086 # E2E_SETS is words
	"$server" -c "$srcdir/etc/mcp-sandbox.ini" \
		--set engine.type="$e2e_type" \
		--set engine.socket="unix://$e2e_sock" \
		--set server.listen=127.0.0.1 \
		--set server.port=0 \
		--set server.instance="$instance" \
		--set server.state_dir="$e2e_tmp/state" \
		--set server.max_body="$max_body" \
		--set server.allowed_origins="$origin" \
		--set sandbox.image="${MCP_SANDBOX_IMAGE:-localhost/mcp-sandbox:latest}" \
		--set sandbox.network=host \
		--set sandbox.disk=0 \
		--set sandbox.index_url="http://127.0.0.1:$index_port/simple/" \
		--set sandbox.upload_dir="$e2e_tmp/upload" \
		--set sandbox.exec_timeout=120s \
		--set auth.keys_file="$e2e_keys" \
		--set sandbox.pool_size=2 \
		${E2E_SETS:-} "$@" >"$e2e_sout" 2>"$e2e_slog" </dev/null &
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
			kill -TERM "$e2e_spid" 2>/dev/null
			e2e_gone "$e2e_spid" 600 || kill -KILL "$e2e_spid" 2>/dev/null
			wait "$e2e_spid" 2>/dev/null
			e2e_spid=
			return 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
}

# e2e_server_stop WHO: SIGTERM to the server e2e_spid; one TAP point: it
# ends within 60 s (else it is killed) with status 0.
e2e_server_stop() {
	n=$((n + 1))
	kill -TERM "$e2e_spid"
	if ! e2e_gone "$e2e_spid" 600; then
		echo "not ok $n - $1 stops within 60 s of SIGTERM"
		kill -KILL "$e2e_spid"
		wait "$e2e_spid" 2>/dev/null
	else
		wait "$e2e_spid"
		st=$?
		if [ $st = 0 ]; then
			echo "ok $n - $1 stops on SIGTERM with status 0"
		else
			echo "not ok $n - $1 stops on SIGTERM with status 0 (status $st)"
			e2e_diag_file "$e2e_slog"
		fi
	fi
	e2e_spid=
}

# e2e_node NAME WHAT SCRIPT [ARG...]: runs a node script of the suite
# against the server at e2e_url, its TAP points numbered on from n, and
# passes its TAP on; then one TAP point: WHAT ran to its end (it printed
# its "# N checks, F failed" line).
e2e_node() {
	e2e_ntap=$e2e_tmp/$1.tap
	nerr=$e2e_tmp/$1.stderr
	what=$2
	shift 2
	# In the background: a signal to this shell interrupts the wait, and the
	# EXIT trap stops node (and its supergateway) by PID.
	SBX_E2E_URL=$e2e_url SBX_E2E_UPLOAD_DIR=$e2e_tmp/upload SBX_E2E_TMP=$e2e_tmp \
		SBX_E2E_SERVER_LOG=$e2e_slog SBX_E2E_GATEWAY=$gateway SBX_E2E_TAP_OFFSET=$n \
		SBX_E2E_MAX_BODY=$max_body SBX_E2E_ALLOWED_ORIGIN=$origin SBX_E2E_ENGINE=$e2e_type \
		SBX_E2E_ENGINE_SOCKET=$e2e_sock SBX_E2E_KEY=$e2e_key SBX_E2E_KEY_BOB=$e2e_key_bob \
		SBX_E2E_ENGINE_SOCKETS="$([ "$e2e_type" != swarm ] || printf '%s' "${MCP_SANDBOX_SWARM_NODE_SOCKETS:-}")" \
		SBX_E2E_SERVER=$server SBX_E2E_CONFIG=$srcdir/etc/mcp-sandbox.ini SBX_E2E_KEYS_FILE=$e2e_keys \
		$limit "$node" "$@" >"$e2e_ntap" 2>"$nerr" </dev/null &
	e2e_npid=$!
	wait "$e2e_npid"
	e2e_npid=
	cat "$e2e_ntap"
	n=$((n + $(grep -cE '^(not )?ok ' "$e2e_ntap")))
	if [ -s "$nerr" ]; then
		echo "# node's stderr:"
		e2e_diag_file "$nerr" 30
	fi
	n=$((n + 1))
	if grep -q '# [0-9]* checks, [0-9]* failed' "$e2e_ntap"; then
		echo "ok $n - $what ran to its end"
	else
		echo "not ok $n - $what ran to its end (it stopped early or timed out)"
	fi
}

# e2e_none_left WHAT: one TAP point: the engine has no container with the
# instance label (those found are removed).
e2e_none_left() {
	n=$((n + 1))
	left=$(e2e_containers "$e2e_type" "$e2e_sock" "$instance")
	st=$?
	if [ $st = 0 ] && [ -z "$left" ]; then
		echo "ok $n - $1"
	else
		echo "not ok $n - $1 (status $st)"
		e2e_remove "$e2e_sock" "$left"
	fi
}

# e2e_second: one TAP point: a second server with the running one's
# server.instance and state folder does not start (it would adopt, expire
# and remove the first one's sandboxes): it says that another server holds
# the instance. The running server's variables are kept.
e2e_second() {
	s_spid=$e2e_spid s_url=$e2e_url s_slog=$e2e_slog s_sout=$e2e_sout
	if e2e_server_start second; then
		kill -TERM "$e2e_spid"
		e2e_gone "$e2e_spid" 600 || kill -KILL "$e2e_spid"
		wait "$e2e_spid" 2>/dev/null
		started=yes
	else
		started=no
	fi
	second_log=$e2e_slog
	e2e_spid=$s_spid e2e_url=$s_url e2e_slog=$s_slog e2e_sout=$s_sout
	n=$((n + 1))
	if [ $started = no ] && grep -q 'already serves server.instance' "$second_log"; then
		echo "ok $n - a second server on the same server.instance and state folder refuses to start: $(grep -o 'another mcp-sandbox server.*state folder [^:]*' "$second_log" | head -n 1)"
	else
		echo "not ok $n - a second server on the same server.instance and state folder refuses to start (it started: $started)"
		e2e_diag_file "$second_log"
	fi
}

# The adoption phase, after the suite's server has stopped. Server A, with
# sandbox.remove_on_exit=false and a warm pool, hands out a named sandbox
# from its pool (whose assignment is then a file in the state folder) and
# is stopped by SIGTERM: the sandbox's container stays, the pool's go.
# Server B, on the same server.instance and state folder with the default
# remove_on_exit=true, adopts it (sbx_manager_recover), serves it over MCP
# (tests/e2e/adopt.mjs) and removes it when it stops. A failed step that
# the next ones need ends the phase (a server still running is then
# e2e_spid); the caller stops it and checks that no container is left.
e2e_adopt() {
	n=$((n + 1))
	metrics_token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	# Where a sandbox can sleep, it is put to sleep before the restart
	# and adopted asleep (tests/e2e/adopt.mjs); a swarm removes it instead.
	idle=30m
	[ "$e2e_type" = swarm ] || idle=4s
	if ! e2e_server_start adopt-a --set sandbox.remove_on_exit=false --set sandbox.pool_size=2 \
		--set server.metrics_token="$metrics_token" --set sandbox.idle_timeout=$idle; then
		echo "not ok $n - adopt: server A (sandbox.remove_on_exit=false) starts"
		return
	fi
	echo "ok $n - adopt: server A (sandbox.remove_on_exit=false) starts: $e2e_url (pid $e2e_spid)"

	# The sandbox is to come from the pool: its 2 ready, as the server's
	# /metrics says (a container or a swarm's service is listed before it
	# is ready), and 2 on the engine.
	n=$((n + 1))
	i=0
	while :; do
		ready=$(curl -sS --max-time 10 -H "Authorization: Bearer $metrics_token" "$e2e_url/metrics" |
			sed -n 's/^mcp_sandbox_pool_ready \([0-9]*\)$/\1/p')
		pooled=$(e2e_count "$(e2e_containers "$e2e_type" "$e2e_sock" "$instance" org.mcp-sandbox.pool=1)")
		if { [ "${ready:-0}" -ge 2 ] && [ "$pooled" -ge 2 ]; } || [ $i -ge 240 ]; then
			break
		fi
		sleep 0.5
		i=$((i + 1))
	done
	if [ "${ready:-0}" -ge 2 ] && [ "$pooled" -ge 2 ]; then
		echo "ok $n - adopt: server A's warm pool holds 2 ready containers"
	else
		echo "not ok $n - adopt: server A's warm pool holds 2 ready containers (${ready:-?} ready, $pooled listed after 120 s)"
	fi

	e2e_node adopt-a "adopt: the step on server A" "$e2e_tmp/suite/adopt.mjs" before
	if [ "$e2e_type" = swarm ]; then
		# Its sandbox counted by the node that runs it.
		n=$((n + 1))
		line=$(curl -sS --max-time 10 -H "Authorization: Bearer $metrics_token" "$e2e_url/metrics" |
			grep '^mcp_sandbox_node_sandboxes{node="[a-z0-9]*"} 1$' | head -n 1)
		if [ -n "$line" ]; then
			echo "ok $n - adopt: /metrics counts the sandbox by its node ($line)"
		else
			echo "not ok $n - adopt: /metrics counts the sandbox by its node"
		fi
	fi
	sid=$("$node" -e 'try { console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).sandbox_id || ""); } catch {}' "$e2e_tmp/adopt.json")

	n=$((n + 1))
	if [ -n "$sid" ] && [ -s "$e2e_tmp/state/instance-$instance/$sid" ]; then
		echo "ok $n - adopt: the sandbox $sid came from the pool: its assignment is a file in the state folder"
	else
		echo "not ok $n - adopt: the sandbox '$sid' came from the pool: its assignment is a file in the state folder"
		ls -la "$e2e_tmp/state/instance-$instance" 2>&1 | sed 's/^/#   /'
	fi

	e2e_server_stop "adopt: server A (sandbox.remove_on_exit=false)"

	n=$((n + 1))
	all=$(e2e_containers "$e2e_type" "$e2e_sock" "$instance")
	st=$?
	mine=
	[ -n "$sid" ] && mine=$(e2e_containers "$e2e_type" "$e2e_sock" "$instance" "org.mcp-sandbox.sandbox-id=$sid")
	if [ $st = 0 ] && [ -n "$mine" ] && [ "$all" = "$mine" ] && [ "$(e2e_count "$mine")" = 1 ]; then
		echo "ok $n - adopt: after server A stopped, the engine keeps the sandbox's container and no other of the instance"
	else
		echo "not ok $n - adopt: after server A stopped, the engine keeps the sandbox's container and no other of the instance (status $st; $(e2e_count "$all") left, $(e2e_count "$mine") of sandbox '$sid')"
		return
	fi

	n=$((n + 1))
	if ! e2e_server_start adopt-b --set sandbox.idle_timeout=$idle; then
		echo "not ok $n - adopt: server B starts on the same server.instance and state folder"
		return
	fi
	echo "ok $n - adopt: server B starts on the same server.instance and state folder: $e2e_url (pid $e2e_spid)"
	n=$((n + 1))
	if grep -q "mcp-sandboxd: info: adopted 1 sandbox(es) of instance $instance\$" "$e2e_slog"; then
		echo "ok $n - adopt: server B says it adopted 1 sandbox"
	else
		echo "not ok $n - adopt: server B says it adopted 1 sandbox"
		e2e_diag_file "$e2e_slog"
	fi

	e2e_node adopt-b "adopt: the step on server B" "$e2e_tmp/suite/adopt.mjs" after

	e2e_server_stop "adopt: server B (sandbox.remove_on_exit=true)"
}

# e2e_mcp SESSION BODY: POSTs BODY to the server's /mcp with alice's key, on
# SESSION unless it is empty; the response's headers go to $e2e_tmp/mcp.headers, its body
# to stdout.
e2e_mcp() {
	if [ -n "$1" ]; then
		set -- -H "Mcp-Session-Id: $1" -d "$2"
	else
		set -- -d "$2"
	fi
	curl -sS --max-time 120 -D "$e2e_tmp/mcp.headers" \
		-H "Authorization: Bearer $e2e_key" \
		-H 'Accept: application/json, text/event-stream' \
		-H 'Content-Type: application/json' "$@" "$e2e_url/mcp"
}

# e2e_stop_setup NAME CODE [ARG...]: starts server NAME (ARGs: more --set), a
# Streamable HTTP session, a sandbox and in it, in the background (e2e_cpid),
# a Python call of CODE, which is to touch /tmp/stop-flag first; one TAP
# point: the call runs. Status 1 when a step failed (a server started is
# still e2e_spid).
e2e_stop_setup() {
	sname=$1 code=$2
	shift 2
	n=$((n + 1))
	if ! e2e_server_start "$sname" "$@"; then
		echo "not ok $n - $sname: the server starts"
		return 1
	fi
	e2e_mcp "" '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"run.sh","version":"1"}}}' >/dev/null
	sess=$(sed -n 's/^[Mm][Cc][Pp]-[Ss][Ee][Ss][Ss][Ii][Oo][Nn]-[Ii][Dd]: *\([0-9a-f]*\).*/\1/p' "$e2e_tmp/mcp.headers")
	sid=$(e2e_mcp "$sess" '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_sandbox","arguments":{}}}' |
		"$node" -e 'let s = ""; process.stdin.on("data", (d) => (s += d));
			process.stdin.on("end", () => { try { console.log(JSON.parse(s).result.structuredContent.sandbox_id || ""); } catch { console.log(""); } });')
	if [ -z "$sess" ] || [ -z "$sid" ]; then
		echo "not ok $n - $sname: a Python call runs in a sandbox (session '$sess', sandbox '$sid')"
		return 1
	fi
	e2e_mcp "$sess" "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"execute_python_code\",\"arguments\":{\"sandbox_id\":\"$sid\",\"timeout\":3600,\"code\":\"$code\"}}}" >/dev/null 2>&1 &
	e2e_cpid=$!
	i=0
	while :; do
		out=$(e2e_mcp "$sess" "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"execute_terminal_command\",\"arguments\":{\"sandbox_id\":\"$sid\",\"command\":\"test -e /tmp/stop-flag && echo flag-is-there\"}}}")
		case $out in
		*flag-is-there*) break ;;
		esac
		if [ $i -ge 300 ]; then
			echo "not ok $n - $sname: a Python call runs in a sandbox (no flag after 60 s)"
			return 1
		fi
		sleep 0.2
		i=$((i + 1))
	done
	echo "ok $n - $sname: a Python call runs in sandbox $sid"
}

# e2e_stop_wait WHAT TENTHS WANT: one TAP point: the server e2e_spid, sent
# a signal at e2e_t0 (date +%s%N), ends within TENTHS/10 s with status WANT
# (else it is killed); then its call's client is let go.
e2e_stop_wait() {
	n=$((n + 1))
	if e2e_gone "$e2e_spid" "$2"; then
		wait "$e2e_spid"
		st=$?
		ms=$((($(date +%s%N) - e2e_t0) / 1000000))
		if [ "$st" = "$3" ]; then
			echo "ok $n - $1: the server exits within $(($2 / 10)) s ($ms ms) with status $3"
		else
			echo "not ok $n - $1: the server exits within $(($2 / 10)) s ($ms ms) with status $3 (status $st)"
			e2e_diag_file "$e2e_slog"
		fi
	else
		echo "not ok $n - $1: the server exits within $(($2 / 10)) s"
		e2e_diag_file "$e2e_slog"
		kill -KILL "$e2e_spid"
		wait "$e2e_spid" 2>/dev/null
	fi
	e2e_spid=
	kill -TERM "$e2e_cpid" 2>/dev/null
	wait "$e2e_cpid" 2>/dev/null
}

# e2e_stop_leftover: stops a server a failed step left running.
e2e_stop_leftover() {
	if [ -n "${e2e_spid:-}" ]; then
		kill -TERM "$e2e_spid"
		e2e_gone "$e2e_spid" 600 || kill -KILL "$e2e_spid"
		wait "$e2e_spid" 2>/dev/null
		e2e_spid=
	fi
	if [ -n "${e2e_cpid:-}" ]; then
		kill -TERM "$e2e_cpid" 2>/dev/null
		wait "$e2e_cpid" 2>/dev/null
	fi
}

# The stop with a call in flight (src/mcp-sandboxd.c), each on a server of
# its own without a pool: SIGTERM cancels a sleeping call and the server
# exits with status 0 leaving no container; a call that ignores its
# cancellation (KeyboardInterrupt caught, sandbox.interrupt_grace=10m) does
# not hold the stop past its bound: status 1 within 30 s, the containers
# swept; and a second SIGTERM exits at once (status 143) with such a call.
e2e_shutdown() {
	sleeper="import time\\nopen('/tmp/stop-flag', 'w').close()\\ntime.sleep(3000)"
	stubborn="import time\\nopen('/tmp/stop-flag', 'w').close()\\nwhile True:\\n    try:\\n        time.sleep(3000)\\n    except KeyboardInterrupt:\\n        pass"

	if e2e_stop_setup stop-a "$sleeper" --set sandbox.pool_size=0; then
		e2e_t0=$(date +%s%N)
		kill -TERM "$e2e_spid"
		e2e_stop_wait "stop-a: SIGTERM with a call in flight" 300 0
		n=$((n + 1))
		if grep -q 'the calls in flight are cancelled' "$e2e_slog"; then
			echo "ok $n - stop-a: its log says the calls in flight are cancelled"
		else
			echo "not ok $n - stop-a: its log says the calls in flight are cancelled"
			e2e_diag_file "$e2e_slog"
		fi
	fi
	e2e_stop_leftover
	e2e_none_left "stop-a: no container with the instance label is left"

	# server.stop_timeout=2s (the default is 10 s): the stop waits it out.
	if e2e_stop_setup stop-b "$stubborn" --set sandbox.pool_size=0 --set sandbox.interrupt_grace=10m \
		--set server.stop_timeout=2s; then
		e2e_t0=$(date +%s%N)
		kill -TERM "$e2e_spid"
		ms=0
		e2e_stop_wait "stop-b: SIGTERM with a call that ignores its cancellation: not past the bound" 300 1
		n=$((n + 1))
		if [ "$ms" -ge 1900 ] && grep -q 'did not finish within 2000 ms (server.stop_timeout' "$e2e_slog"; then
			echo "ok $n - stop-b: it waited server.stop_timeout (2 s; $ms ms), and its log names it"
		else
			echo "not ok $n - stop-b: it waited server.stop_timeout (2 s; $ms ms), and its log names it"
			e2e_diag_file "$e2e_slog"
		fi
	fi
	e2e_stop_leftover
	e2e_none_left "stop-b: no container with the instance label is left (swept)"

	if e2e_stop_setup stop-c "$stubborn" --set sandbox.pool_size=0 --set sandbox.interrupt_grace=10m; then
		kill -TERM "$e2e_spid"
		i=0
		while ! grep -q 'stopping:' "$e2e_slog" && [ $i -lt 100 ]; do
			sleep 0.05
			i=$((i + 1))
		done
		e2e_t0=$(date +%s%N)
		kill -TERM "$e2e_spid"
		e2e_stop_wait "stop-c: a second SIGTERM while the stop waits" 50 143
	fi
	e2e_stop_leftover
	e2e_none_left "stop-c: no container with the instance label is left (swept)"
}

run_e2e() {
	e2e_type=$1 e2e_sock=$2
	srcdir=${SBX_SRCDIR:-.}
	builddir=${SBX_BUILDDIR:-.}
	[ -n "$e2e_sock" ] && [ -S "$e2e_sock" ] || e2e_skip "no $e2e_type engine (run tools/provision-engines)"
	e2e_need_tools "the e2e suite"

	instance=e2e-$e2e_type-$$-$(date +%s)
	max_body=65536 # small, so that the 413 check sends little
	origin=http://allowed.example
	e2e_tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbx-e2e-$e2e_type.XXXXXX") || {
		echo "Bail out! mktemp failed"
		exit 1
	}
	trap e2e_cleanup EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM

	e2e_npm_modules
	# ES modules resolve packages next to the importing file: run a copy of
	# the suite beside a node_modules link (the source tree may be read-only).
	mkdir -p "$e2e_tmp/suite" "$e2e_tmp/upload" "$e2e_tmp/index" "$e2e_tmp/state"
	chmod 700 "$e2e_tmp/state" # the server refuses a state folder its group may write to
	cp "$srcdir"/tests/e2e/*.mjs "$e2e_tmp/suite/" && ln -s "$mods" "$e2e_tmp/suite/node_modules" || {
		echo "Bail out! cannot set up $e2e_tmp/suite"
		exit 1
	}
	gateway=$mods/supergateway/dist/index.js
	[ -r "$gateway" ] || gateway=$mods/.bin/supergateway

	# The API keys of every server of the run: tenants alice (the suite's)
	# and bob. `keys add` prints the key alone; the file keeps its digest.
	e2e_keys=$e2e_tmp/keys
	for tenant in alice bob; do
		key=$("$server" -c "$srcdir/etc/mcp-sandbox.ini" --set auth.keys_file="$e2e_keys" \
			keys add "$tenant" 2>"$e2e_tmp/keys.err" </dev/null)
		case $key in
		msk_*) ;;
		*)
			e2e_diag_file "$e2e_tmp/keys.err"
			echo "Bail out! mcp-sandboxd keys add $tenant printed no key"
			exit 1
			;;
		esac
		if [ "$tenant" = alice ]; then e2e_key=$key; else e2e_key_bob=$key; fi
	done
	if [ "$(stat -c %a "$e2e_keys")" != 600 ]; then
		echo "Bail out! the keys file $e2e_keys is not 0600 ($(stat -c %a "$e2e_keys"))"
		exit 1
	fi

	python3 "$srcdir/tests/pkgindex.py" "$e2e_tmp/index" >"$e2e_tmp/index.port" 2>"$e2e_tmp/index.err" &
	e2e_ipid=$!
	i=0
	while ! grep -q '^[0-9][0-9]*$' "$e2e_tmp/index.port" 2>/dev/null; do
		if [ $i -ge 100 ] || ! kill -0 "$e2e_ipid" 2>/dev/null; then
			e2e_diag_file "$e2e_tmp/index.err"
			echo "Bail out! tests/pkgindex.py did not start"
			exit 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
	index_port=$(head -n 1 "$e2e_tmp/index.port")

	if ! e2e_server_start server; then
		echo "Bail out! mcp-sandboxd did not start (no 'listening on' line)"
		exit 1
	fi
	echo "# $e2e_type engine at $e2e_sock, server $e2e_url (pid $e2e_spid), instance $instance, index port $index_port"

	limit=
	command -v timeout >/dev/null 2>&1 && limit="timeout -k 10 ${SBX_E2E_TIMEOUT:-900}"
	n=0
	e2e_node node "the node suite" "$e2e_tmp/suite/run.mjs"

	# The filter finds the server's sandboxes while it runs: the final
	# check below is not vacuous.
	n=$((n + 1))
	live=$(e2e_containers "$e2e_type" "$e2e_sock" "$instance")
	st=$?
	count=$(e2e_count "$live")
	if [ $st = 0 ] && [ "$count" -gt 0 ]; then
		echo "ok $n - the engine lists $count sandboxes with label org.mcp-sandbox.instance=$instance"
	elif [ $st = 0 ] && [ -n "${SBX_E2E_ONLY:-}" ]; then
		echo "ok $n - the engine lists sandboxes with the instance label # SKIP SBX_E2E_ONLY may create none"
	else
		echo "not ok $n - the engine lists sandboxes with label org.mcp-sandbox.instance=$instance (status $st, $count found)"
	fi

	e2e_second

	e2e_server_stop mcp-sandboxd
	e2e_none_left "no container with the instance label is left"

	if e2e_want adopt; then
		e2e_adopt
		if [ -n "${e2e_spid:-}" ]; then # a step failed while a server ran
			kill -TERM "$e2e_spid"
			e2e_gone "$e2e_spid" 600 || kill -KILL "$e2e_spid"
			wait "$e2e_spid" 2>/dev/null
			e2e_spid=
		fi
		e2e_none_left "adopt: no container with the instance label is left"
	fi
	if e2e_want shutdown; then
		e2e_shutdown
	fi
	echo "1..$n"
}
