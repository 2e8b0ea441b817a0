# Sourced by tests/ui-docker.engine: run_ui TYPE SOCKET
# The page (/ui) in a real browser: starts its own mcp-sandboxd with API keys
# for tenants alice and bob (as tests/e2e/run.sh does, whose helpers it
# uses), runs tests/e2e/ui.mjs (playwright-core driving Debian's chromium,
# headless), stops the server by PID and checks that no container with the
# instance label is left. Screenshots go to BUILDDIR/tests/ui-screenshots/.
# Prints TAP; the plan comes last.
#
# Without the engine, node, the npm packages or chromium
# (${MCP_SANDBOX_CHROMIUM:-/usr/bin/chromium}; tools/provision-engines
# installs it) the test is skipped, unless MCP_SANDBOX_REQUIRE_ENGINES=1:
# then it fails (Bail out!).
# shellcheck disable=SC1091
. "${SBX_SRCDIR:-.}/tests/e2e/run.sh"

run_ui() {
	e2e_type=$1 e2e_sock=$2
	srcdir=${SBX_SRCDIR:-.}
	builddir=${SBX_BUILDDIR:-.}
	[ -n "$e2e_sock" ] && [ -S "$e2e_sock" ] || e2e_skip "no $e2e_type engine (run tools/provision-engines)"
	node=$(command -v node) || e2e_skip "node is not installed (the e2e suite needs Node.js 20+)"
	"$node" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
		e2e_skip "node $("$node" --version) is older than 20"
	chromium=${MCP_SANDBOX_CHROMIUM:-/usr/bin/chromium}
	[ -x "$chromium" ] || e2e_skip "no browser at $chromium (apt-get install chromium; tools/provision-engines installs it)"
	server=$builddir/src/mcp-sandboxd
	if [ ! -x "$server" ]; then
		echo "Bail out! no $server (build first)"
		exit 1
	fi

	instance=ui-$e2e_type-$$-$(date +%s)
	max_body=65536
	origin=http://allowed.example
	index_port=9 # no index: nothing is installed here
	e2e_tmp=$(mktemp -d "${TMPDIR:-/tmp}/sbx-ui-$e2e_type.XXXXXX") || {
		echo "Bail out! mktemp failed"
		exit 1
	}
	trap e2e_cleanup EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM

	if ! mods=$(sh "$srcdir/tools/e2e-deps" "$srcdir" 2>"$e2e_tmp/deps.err"); then
		e2e_diag_file "$e2e_tmp/deps.err"
		e2e_skip "the npm packages of tests/e2e could not be installed (tools/e2e-deps)"
	fi
	[ -r "$mods/playwright-core/package.json" ] || e2e_skip "no playwright-core in $mods (tools/e2e-deps)"
	mkdir -p "$e2e_tmp/suite" "$e2e_tmp/upload" "$e2e_tmp/state"
	chmod 700 "$e2e_tmp/state"
	cp "$srcdir"/tests/e2e/*.mjs "$e2e_tmp/suite/" && ln -s "$mods" "$e2e_tmp/suite/node_modules" || {
		echo "Bail out! cannot set up $e2e_tmp/suite"
		exit 1
	}
	shots=$builddir/tests/ui-screenshots
	rm -rf "$shots" && mkdir -p "$shots" || {
		echo "Bail out! cannot make $shots"
		exit 1
	}

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

	if ! e2e_server_start server; then
		echo "Bail out! mcp-sandboxd did not start (no 'listening on' line)"
		exit 1
	fi
	echo "# $e2e_type engine at $e2e_sock, server $e2e_url (pid $e2e_spid), instance $instance"
	echo "# screenshots in $shots"

	limit=
	command -v timeout >/dev/null 2>&1 && limit="timeout -k 10 ${SBX_E2E_TIMEOUT:-600}"
	n=0
	gateway=
	SBX_UI_CHROMIUM=$chromium SBX_UI_SCREENSHOTS=$shots
	export SBX_UI_CHROMIUM SBX_UI_SCREENSHOTS
	e2e_node ui "the page's browser test" "$e2e_tmp/suite/ui.mjs"
	n=$((n + 1))
	count=$(find "$shots" -name '*.png' | wc -l)
	if [ "$count" -ge 8 ]; then
		echo "ok $n - $count screenshots in $shots"
	else
		echo "not ok $n - 8 screenshots in $shots ($count)"
	fi

	e2e_server_stop mcp-sandboxd
	e2e_none_left "no container with the instance label is left"
	echo "1..$n"
}
