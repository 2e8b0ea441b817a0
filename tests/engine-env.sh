# Sourced by tests/engine-suite (and the e2e, soak and page scripts it sources):
# the engine sockets, skip or bail, and the runs of tests/test-engine and
# tests/test-engine-restart. The sockets come from the environment or from
# tools/provision-engines' engines.env.
# Without an engine the test is skipped, unless MCP_SANDBOX_REQUIRE_ENGINES=1 (CI).
# SBX_SKIP_ENGINE_TESTS=1 skips every engine test whatever else is set: tools/run-tests
# sets it for distcheck, whose tree is the one the two passes before it have just run.
if [ "${SBX_SKIP_ENGINE_TESTS:-0}" = 1 ]; then
	echo "1..0 # SKIP SBX_SKIP_ENGINE_TESTS=1 (the engine suites ran before, on the same sources)"
	exit 0
fi
env_file="${MCP_SANDBOX_ENGINES_DIR:-/var/lib/mcp-sandbox-engines}/engines.env"
if [ -z "${MCP_SANDBOX_DOCKER_SOCKET:-}${MCP_SANDBOX_PODMAN_SOCKET:-}" ] && [ -r "$env_file" ]; then
	. "$env_file"
fi
# The swarm's TLS node and its certificates, which the test programs read
# from their environment (the suites on the swarm reach that node with them).
if [ -z "${MCP_SANDBOX_TLS_DIR:-}" ] && [ -r "$env_file" ]; then
	MCP_SANDBOX_TLS_DIR=$(sed -n 's/^MCP_SANDBOX_TLS_DIR=//p' "$env_file")
	MCP_SANDBOX_SWARM_TLS_URL=$(sed -n 's/^MCP_SANDBOX_SWARM_TLS_URL=//p' "$env_file")
fi
[ -z "${MCP_SANDBOX_TLS_DIR:-}" ] || export MCP_SANDBOX_TLS_DIR MCP_SANDBOX_SWARM_TLS_URL

# skip_or_bail WHY: skip the test, or fail it under MCP_SANDBOX_REQUIRE_ENGINES=1.
skip_or_bail() {
	if [ "${MCP_SANDBOX_REQUIRE_ENGINES:-0}" = 1 ]; then
		echo "Bail out! $1"
		exit 1
	fi
	echo "1..0 # SKIP $1"
	exit 0
}

# require_engine TYPE SOCKET: the shared engine's socket is there, or skip/bail.
require_engine() {
	if [ -z "$2" ] || [ ! -S "$2" ]; then
		skip_or_bail "no $1 engine socket (run tools/provision-engines)"
	fi
}

# run_engine_test TYPE SOCKET [--via-tcp]
run_engine_test() {
	type=$1 sock=$2 via=${3:-}
	require_engine "$type" "$sock"
	exec "${SBX_BUILDDIR:-.}/tests/test-engine" $via "$type" "unix://$sock" \
		"${MCP_SANDBOX_IMAGE:-localhost/mcp-sandbox:latest}"
}

# run_restart_test TYPE SOCKET: tests/test-engine-restart on a private engine of
# its own (tests/private-engine), which needs root and the shared engine (the
# image comes from it, and the end checks its storage).
run_restart_test() {
	type=$1 sock=$2
	require_engine "$type" "$sock"
	[ "$(id -u)" -eq 0 ] || skip_or_bail "a private $type engine needs root"
	exec "${SBX_BUILDDIR:-.}/tests/test-engine-restart" "$type" \
		"${MCP_SANDBOX_IMAGE:-localhost/mcp-sandbox:latest}" "unix://$sock"
}

# The rootless Podman's socket (tools/provision-engines runs it as the user
# sbx-rootless): MCP_SANDBOX_PODMAN_ROOTLESS_SOCKET, else engines.env's.
rootless_socket() {
	if [ -z "${MCP_SANDBOX_PODMAN_ROOTLESS_SOCKET:-}" ] && [ -r "$env_file" ]; then
		MCP_SANDBOX_PODMAN_ROOTLESS_SOCKET=$(sed -n 's/^MCP_SANDBOX_PODMAN_ROOTLESS_SOCKET=//p' "$env_file")
	fi
	printf '%s\n' "${MCP_SANDBOX_PODMAN_ROOTLESS_SOCKET:-}"
}
