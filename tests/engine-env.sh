# Sourced by tests/engine-*.test: run tests/test-engine against one engine.
# The sockets come from the environment or from tools/provision-engines' engines.env.
# Without an engine the test is skipped, unless MCP_SANDBOX_REQUIRE_ENGINES=1 (CI).
env_file="${MCP_SANDBOX_ENGINES_DIR:-/var/lib/mcp-sandbox-engines}/engines.env"
if [ -z "${MCP_SANDBOX_DOCKER_SOCKET:-}${MCP_SANDBOX_PODMAN_SOCKET:-}" ] && [ -r "$env_file" ]; then
	. "$env_file"
fi

# run_engine_test TYPE SOCKET [--via-tcp]
run_engine_test() {
	type=$1 sock=$2 via=${3:-}
	if [ -z "$sock" ] || [ ! -S "$sock" ]; then
		if [ "${MCP_SANDBOX_REQUIRE_ENGINES:-0}" = 1 ]; then
			echo "Bail out! no $type engine socket (run tools/provision-engines)"
			exit 1
		fi
		echo "1..0 # SKIP no $type engine (run tools/provision-engines)"
		exit 0
	fi
	exec "${SBX_BUILDDIR:-.}/tests/test-engine" $via "$type" "unix://$sock" \
		"${MCP_SANDBOX_IMAGE:-localhost/mcp-sandbox:latest}"
}
