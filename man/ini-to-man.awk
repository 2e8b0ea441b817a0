# etc/mcp-sandbox.ini -> mcp-sandbox.ini(5) in roff: the shipped file is the
# one source of every key's documentation (tests/test-settings checks it
# against the settings table). The header comment is the description, each
# [section] a subsection, each key a tagged paragraph with its default and
# its comment lines.
function esc(t) {
	gsub(/\\/, "\\e", t)
	if (t ~ /^[.']/) t = "\\&" t
	return t
}
BEGIN {
	print ".TH MCP-SANDBOX.INI 5 \"\" \"mcp-sandbox " version "\" \"File Formats\""
	print ".SH NAME"
	print "mcp-sandbox.ini \\- configuration of mcp-sandboxd"
	print ".SH SYNOPSIS"
	print sysconfdir "/mcp-sandbox/mcp-sandbox.ini"
	print ".SH DESCRIPTION"
	print "The file " "\\fBmcp-sandboxd\\fR(8) reads at start (\\fB\\-c\\fR names another)."
	print "Every key is listed below with its default, in its section."
	print ".PP"
	n = 0; sec = ""
}
/^#/ {
	t = $0; sub(/^# ?/, "", t)
	if (sec == "") { if (t != "" && NR > 1) print esc(t); else if (t == "") print ".PP"; next }
	c[n++] = t; next
}
/^\[.*\]$/ { sec = substr($0, 2, length($0) - 2); print ".SS [" sec "]"; n = 0; next }
/^[a-z_]+ =/ {
	key = $1; val = $0; sub(/^[a-z_]+ = ?/, "", val)
	print ".TP"
	print "\\fB" sec "." key "\\fR = " (val == "" ? "(empty)" : esc(val))
	for (i = 0; i < n; i++) print esc(c[i])
	n = 0; next
}
/^$/ { n = 0; next }
END {
	print ".SH SEE ALSO"
	print "\\fBmcp-sandboxd\\fR(8)"
}
