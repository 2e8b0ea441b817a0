# Turns a text file into a C array: static const char sbx_interp_py[] = "...";
# awk only (no xxd or python3 on the build host); escapes by concatenation,
# not gsub, whose backslash handling differs between awks.
BEGIN {
	print "/* Generated from src/sandbox/interp/sbx_interp.py by src/sandbox/interp/embed.awk. */"
	print "static const char sbx_interp_py[] ="
}
{
	out = ""
	n = length($0)
	for (i = 1; i <= n; i++) {
		c = substr($0, i, 1)
		if (c == "\\")
			out = out "\\\\"
		else if (c == "\"")
			out = out "\\\""
		else if (c == "?")
			out = out "\\?"
		else if (c == "\t")
			out = out "\\t"
		else
			out = out c
	}
	print "\t\"" out "\\n\""
}
END { print "\t\"\";" }
