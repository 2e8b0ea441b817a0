/* SPDX-License-Identifier: MIT */
/*
 * The server's settings: an INI file (etc/mcp-sandbox.ini) plus --set
 * overrides, checked against one table-driven schema (src/base/settings.c). Adding
 * a key is one line in that table and one field here.
 *
 * Every mistake is an error, never a warning: unknown section, unknown key,
 * bad value, duplicate key, syntax error. Messages start with "FILE:LINE: "
 * (or "--set section.key: ") and name the allowed range or words.
 */
#ifndef SBX_SETTINGS_H
#define SBX_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sbx/error.h"

/* Largest count a [quota] key (and an API key's limit) may give. */
#define SBX_QUOTA_COUNT_MAX 1000000

/* Largest settings file accepted, in bytes. */
#define SBX_SETTINGS_FILE_MAX (1024 * 1024)

/* The parsed values. Strings are owned, never NULL after init ("" = unset). */
struct sbx_settings {
	struct {
		char *type;	   /* "docker" or "podman" */
		char *socket;	   /* "unix:///path", "/path", "tcp://host:port"; "" = discover */
		char *api_version; /* "" = negotiate */
		int64_t timeout_ms;
		/* TLS for tcp:// endpoints (the engine's, a swarm node's):
		 * PEM files; "" = plain TCP (all three) or the system's CAs. */
		char *tls_ca, *tls_cert, *tls_key;
	} engine;
	struct {
		char *listen;
		int64_t port;
		char *public_url; /* "" = http://LISTEN:PORT */
		int64_t max_body; /* bytes */
		/* A body may take body_timeout_ms plus a second per body_min_rate bytes. */
		int64_t body_timeout_ms;
		int64_t body_min_rate; /* bytes per second */
		char *allowed_origins;
		char *instance; /* names this server's sandboxes in engine labels */
		int64_t session_timeout_ms;
		/* The stop after SIGINT/SIGTERM waits this long for the calls
		 * (src/mcp-sandboxd.c), then sweeps and exits with status 1. */
		int64_t stop_timeout_ms;
		int64_t max_sessions;		 /* past it the LRU idle session is evicted */
		int64_t max_sessions_per_ip;	 /* 0 = no limit */
		int64_t max_sessions_per_tenant; /* 0 = no limit */
		int64_t max_connections;	 /* more get 503 + Retry-After */
		int64_t max_connections_per_ip;	 /* 0 = no limit (libmicrohttpd closes more) */
		int64_t
		    max_calls_per_session; /* tool calls running per session; more are refused */
		/* An event stream whose client takes nothing this long is closed. */
		int64_t stream_stall_timeout_ms;
		int64_t max_queued;	      /* bytes queued for all event streams together */
		int64_t max_downloads;	      /* artifact downloads at once; more get 503 */
		int64_t max_downloads_per_ip; /* the same per client address; 0 = no limit */
		/* A download must have sent, past stream_stall_timeout, this many
		 * bytes per second since it began, or it is cut off. */
		int64_t download_min_rate;
		char *state_dir; /* "" = $STATE_DIRECTORY, else /var/lib/mcp-sandbox if it exists */
		int64_t link_ttl_ms;	    /* a signed artifact link works this long */
		bool unsigned_links;	    /* links without exp and sig work while auth is off */
		int64_t resource_max_bytes; /* resources/read returns no larger file */
		/* A resources/list page lists no further sandbox after this. */
		int64_t resource_list_time_ms;
		char *audit_log;     /* "" = standard error (include/sbx/audit.h) */
		char *log_level;     /* error, warning, info, debug (include/sbx/log.h) */
		char *log_format;    /* text or json */
		char *metrics_token; /* GET /metrics' bearer token; "" = loopback only */
	} server;
	struct {
		char *image;
		int64_t memory; /* bytes */
		int64_t nano_cpus;
		int64_t pids_limit;
		int64_t disk;  /* bytes a sandbox may write (storage-opt size); 0 = no bound */
		char *runtime; /* "" = the engine's default */
		char *network;
		int64_t exec_timeout_ms;
		int64_t output_cap; /* bytes */
		char *upload_dir;   /* "" = uploads disabled */
		/* The package index the server fetches for a sandbox's pip (src/sandbox/
		 * egress.c); may hold user:password, which never reaches a sandbox. */
		char *index_url;
		/* A second path on the index's host fetched with its credentials
		 * (where it serves its files); "" = only index_url's path. */
		char *index_files_path;
		/* Comma-separated HOST[:PORT] (include/sbx/hostport.h) sandbox code
		 * may reach through the server's relay; "" = only the index. */
		char *egress_allow;
		/* Connections relayed at once (src/egress/egress_slots.c): in all,
		 * and per tenant; a tunnel's lifetime. */
		int64_t egress_connections;
		int64_t egress_connections_per_tenant;
		int64_t egress_tunnel_lifetime_ms;
		/* The relay's and the fetches' deadlines (src/egress/): its hello,
		 * a request head, a write to it, a fetch under 1 KiB/s, an index
		 * page. */
		int64_t egress_hello_timeout_ms;
		int64_t egress_head_timeout_ms;
		int64_t egress_write_timeout_ms;
		int64_t egress_low_speed_time_ms;
		int64_t egress_page_timeout_ms;
		bool allow_direct_urls; /* package specs may be URLs, paths, files */
		int64_t max_sandboxes;
		int64_t install_timeout_ms;
		int64_t max_upload; /* bytes */
		bool remove_on_exit;
		/* Sandboxes whose engine dropped their limits are run, not refused. */
		bool allow_unlimited;
		int64_t pool_size; /* started containers kept ready; 0 = no pool */
		/* The pool grows up to pool_max (when above pool_size) by one for
		 * each create that found it empty, and falls back to pool_size
		 * pool_shrink_after the last such create; pool_fill containers
		 * are started at once while it refills. */
		int64_t pool_max;
		int64_t pool_fill;
		int64_t pool_shrink_after_ms;
		int64_t image_inline_max;   /* bytes; 0 = no images inline */
		int64_t interrupt_grace_ms; /* after the KeyboardInterrupt, before the kill */
		/* Lifecycle: a client's timeout argument is cut to it. */
		int64_t max_exec_timeout_ms;
		/* A sandbox unused this long is put to sleep (removed where it
		 * cannot sleep); 0 = never. */
		int64_t idle_timeout_ms;
		/* A sandbox asleep this long is removed; 0 = never. */
		int64_t sleep_lifetime_ms;
		/* A sandbox older than this is removed; 0 = no limit. */
		int64_t max_lifetime_ms;
		/* Each sandbox's CPU and memory sampled this often; 0 = never. */
		int64_t usage_interval_ms;
	} sandbox;
	struct {
		char *mode;	 /* "keys" or "none" */
		char *keys_file; /* absolute path; "" = none (loopback only) */
	} auth;
	/* Per-tenant defaults; an API key's own limit replaces each (0 = none). */
	struct {
		int64_t sandboxes; /* sandboxes at once */
		int64_t calls;	   /* tool calls at once, all sessions together */
		int64_t memory;	   /* bytes per sandbox; capped by sandbox.memory */
		int64_t nano_cpus; /* per sandbox; capped by sandbox.cpus */
		int64_t installs;  /* package installs at once, all sandboxes together */
	} quota;
};

enum sbx_setting_type {
	SBX_SETTING_STRING,   /* char * */
	SBX_SETTING_BOOL,     /* bool: true/false, yes/no, on/off, 1/0 */
	SBX_SETTING_INT,      /* int64_t in [min, max] */
	SBX_SETTING_SIZE,     /* int64_t bytes; suffixes k, m, g (powers of 1024) */
	SBX_SETTING_DURATION, /* int64_t milliseconds; suffixes ms, s, m */
	SBX_SETTING_ENUM,     /* char *, one of words */
	SBX_SETTING_CPUS,     /* int64_t nano-CPUs, written as a decimal ("0.5") */
};

/* One schema row. min/max bound the stored value (bytes, ms, nano-CPUs). */
struct sbx_setting {
	const char *section;
	const char *key;
	enum sbx_setting_type type;
	size_t offset; /* into struct sbx_settings */
	const char *def;
	const char *help;
	int64_t min, max;
	const char *const *words; /* SBX_SETTING_ENUM: NULL-terminated */
	/* Optional extra check of the value as written (a string's, or a number's
	 * within its range); fills why and returns false to refuse. */
	bool (*check)(const char *value, char *why, size_t why_size);
};

/* The schema, in file order; *ret_n receives its length. */
const struct sbx_setting *sbx_settings_schema(size_t *ret_n);

/* Fill s with the defaults. Returns 0 or -ENOMEM; s needs no release on failure. */
int sbx_settings_init(struct sbx_settings *s);

/*
 * Apply an INI file (at most SBX_SETTINGS_FILE_MAX bytes) on top of s.
 * -ENOENT names the path; any other mistake is -EINVAL with "PATH:LINE: ...".
 * On failure s may be partly updated but stays valid for release.
 */
int sbx_settings_load_file(struct sbx_settings *s, const char *path, struct sbx_error *err);

/* Apply one "section.key=value" override; on failure s is unchanged. */
int sbx_settings_set(struct sbx_settings *s, const char *assignment, struct sbx_error *err);

/* Free the strings; s is zeroed and may be initialised again. */
void sbx_settings_release(struct sbx_settings *s);

/* The value parsers of the schema, for other files in the same notation
 * (the keys file's limits): a size with suffix k, m or g in bytes, and a
 * number of CPUs ("0.5") in nano-CPUs. 0, -EINVAL, or -ERANGE past int64. */
int sbx_parse_size(const char *s, int64_t *ret);
int sbx_parse_cpus(const char *s, int64_t *ret);

/* Write the effective settings as INI that sbx_settings_load_file accepts. */
int sbx_settings_dump(const struct sbx_settings *s, FILE *out);
/* The same for people (mcp-sandboxd --dump): the password of
 * sandbox.index_url and a server.metrics_token shown as "***", each after a
 * comment line saying so. The text still loads, but with "***" for the
 * password; a token of "***" is refused (too short) until it is given
 * again. */
int sbx_settings_dump_redacted(const struct sbx_settings *s, FILE *out);

#endif
