/* ah_env_table.c: the rows of the AUTOHA_* table — each variable's name, type, default as text,
 * syntax, doc paragraph, bounds and the settings field it fills (settings/ah_env.h) — and the
 * lookups by index and name. The parsers (ah_env.c) and the printers (`autoha env`,
 * docs/environment.md) read the rows only through these lookups, so the table is data alone. */
#include <stddef.h>
#include <string.h>

#include "ah_coord.h"
#include "ah_env.h"
#include "ah_tune.h"

#define FIELD(f) offsetof(ah_settings_t, f), sizeof(((ah_settings_t *)0)->f), NULL
/* A row whose invalid values select `fallback` instead of the default. */
#define FIELD_FALLBACK(f, fallback)                                                                \
  offsetof(ah_settings_t, f), sizeof(((ah_settings_t *)0)->f), fallback

static const ah_env_var_t env_table[] = {
    {"AUTOHA_ENABLE", AH_ENV_BOOL, "1", "1|0 (also y|n, yes|no, on|off, true|false)",
     "Turns autoha on. With 0, libautoha.so is a pure pass-through: every NCCL call goes straight "
     "to NCCL, nothing is timed, tuned, overridden or reported, and no QP is touched. Use it to "
     "rule autoha out when a job misbehaves, without removing it from LD_PRELOAD.",
     0, 0, NULL, FIELD(enable)},
    {"AUTOHA_MODE", AH_ENV_ENUM, "tune", "observe|fixed|tune",
     "What autoha does with each collective. observe records NCCL's own choice and its time and "
     "changes nothing; fixed applies AUTOHA_OVERRIDE and a loaded AUTOHA_PROFILE and otherwise "
     "keeps NCCL's choice; tune also searches the remaining keys online (AutoCCL-style) and pins "
     "each key's winner. Every mode writes the report. A value that does not parse selects "
     "observe, the least invasive mode, not the default.",
     0, 0, "observe|fixed|tune", FIELD_FALLBACK(mode, "observe")},
    {"AUTOHA_LOG", AH_ENV_ENUM, "warn", "error|warn|info|debug",
     "How much autoha logs. Every line starts as NCCL's do, 'host:pid:tid [rank] autoha LEVEL "
     "subsystem: ' ([-] until the process knows its rank; a thread with no rank of its own, as "
     "autoha's failover thread, NCCL's proxy or one thread driving several GPUs, shows the "
     "process's ranks, [0-3]; a failover line about a queue pair names the rank whose queue pair "
     "it is). info adds one line per decision per process, in words: the key, "
     "the configuration it runs, its time against NCCL's own choice and the calls the search "
     "took; debug adds per-call detail and is meant for short runs. When NCCL hands "
     "autoha its logger (as the tuner plugin), its info lines also go through it, tagged TUNING, "
     "so NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING shows them in NCCL's output whatever this says "
     "(warnings and errors autoha prints itself, once).",
     0, 0, "error|warn|info|debug", FIELD(log_level)},
    {"AUTOHA_LOG_FILE", AH_ENV_PATH, "", "PATH template (%h %p %r %j %%), or empty for stderr",
     "Writes the log lines of each process to this file instead of stderr, appending. %h is the "
     "host name, %p the process id, %r the process's rank (its first communicator's), %j the "
     "scheduler's job id ('nojob' without one), %% a percent sign; missing folders are created. "
     "With %r, lines logged before the rank is known are kept in memory and start the file; a "
     "process that never learns a rank writes them at exit with %r as 'all'. A file that cannot "
     "be opened leaves the lines on stderr, with one error saying why.",
     0, 0, NULL, FIELD(log_file)},
    {"AUTOHA_LOG_TIME", AH_ENV_BOOL, "0", "1|0 (also y|n, yes|no, on|off, true|false)",
     "Puts the wall-clock time, [YYYY-MM-DD HH:MM:SS.microseconds], in front of every log line.", 0,
     0, NULL, FIELD(log_time)},
    {"AUTOHA_LOG_SUBSYS", AH_ENV_SUBSYS, "all",
     "all, or SUB,SUB... or ^SUB,SUB... (SUB: "
     "init|env|tune|coord|qp|report|health)",
     "Which parts of autoha log, as NCCL_DEBUG_SUBSYS: a comma-separated list of subsystems, or "
     "with a leading ^ every subsystem but those. init is loading and the tuner plugin face, env "
     "the AUTOHA_* variables, tune the search and its decisions, coord the coordinator hub and its "
     "clients, qp the queue-pair hook, report the reports and profiles, health hang and straggler "
     "diagnosis. The level (AUTOHA_LOG) applies within the chosen subsystems.",
     0, 0, NULL, FIELD(log_subsys)},
    {"AUTOHA_OVERRIDE", AH_ENV_OVERRIDE, "",
     "RULE;RULE...  RULE = COLL|*[@LOW-HIGH]:algo=A,proto=P,nchannels=N,chunk=SIZE",
     "Pins the configuration of matching collectives, e.g. "
     "'allreduce@1M-64M:algo=ring,proto=simple,nchannels=16;allgather:nchannels=8'. The range is "
     "in bytes per rank (K, M, G are binary units; either end may be left open); fields left out "
     "keep NCCL's choice. When several rules match a call the most specific wins: a named "
     "collective beats '*', then the narrower range, then the earlier rule. A malformed rule logs "
     "one error naming the bad token and its position and is ignored; the other rules still "
     "apply. A rule asking for an algorithm and protocol pair that NCCL cannot run for a call is "
     "refused with a message, never forced. Applied in modes fixed and tune.",
     0, 0, NULL, FIELD(override_text)},
    {"AUTOHA_REPORT", AH_ENV_PATH, "autoha-reports/%j/%h-%p.json",
     "PATH template (%h %p %r %j %%), or off",
     "Where each process writes its tuning report (JSON, described in docs/report.md): at every "
     "communicator's teardown, at exit, and every AUTOHA_REPORT_INTERVAL_S seconds. %h is the host "
     "name, %p the process id, %r the process's lowest rank ('all' when unknown), %j the job (the "
     "scheduler's or launcher's job id: SLURM_JOB_ID, TORCHELASTIC_RUN_ID, LSB_JOBID, PBS_JOBID, "
     "FLUX_JOB_ID or PMIX_NAMESPACE; without one, comm- and the identity of the process's largest "
     "communicator, which every rank of the job computes alike), %% a percent sign. So by default "
     "every job gets one folder, autoha-reports/<job>/, with one report per process in it. A "
     "relative path is relative to the job's working directory; missing folders are created. The "
     "file is written to a temporary name and renamed, so a reader never sees half a report. off "
     "writes no report.",
     0, 0, NULL, FIELD(report)},
    {"AUTOHA_REPORT_INTERVAL_S", AH_ENV_INT, "60", "0..86400",
     "Seconds between periodic rewrites of the report during a long job, so a report exists even "
     "when a job is killed. The first one comes 10 s after the process's first communicator (or "
     "after this many seconds, when fewer), so a job killed in its first minute leaves one too. "
     "0 writes it only at communicator teardown and at exit.",
     0, 86400, NULL, FIELD(report_interval_s)},
    {"AUTOHA_METRICS", AH_ENV_PATH, "off", "PATH template (%h %p %r %j %%) ending in .prom, or off",
     "Where each process writes its metrics (docs/metrics.md): the figures of its report (calls, "
     "mean time, bus bandwidth, tuning state and applied configuration per key; findings per "
     "kind; failovers; the coordinator's connection) as Prometheus text, for node_exporter's "
     "textfile collector, e.g. /var/lib/node_exporter/textfile/autoha-%j-%h-%p.prom. Written "
     "when the report is (teardown, exit, every AUTOHA_REPORT_INTERVAL_S seconds), from the "
     "same snapshot, to a temporary name in the same folder and renamed, as the collector "
     "requires; missing folders are created. It needs no jansson and no AUTOHA_REPORT. Off by "
     "default: the collector reads one folder that only the operator knows, and files left in "
     "a job's working directory would be read by nothing. A name that does not end in .prom is "
     "written, with one warning that the collector ignores it.",
     0, 0, NULL, FIELD(metrics)},
    {"AUTOHA_PROFILE", AH_ENV_PATH, "off", "PATH template (%h %p %r %j %%), or off",
     "A report from an earlier run to start from: each key that was tuned (or overridden) there "
     "runs that configuration from its first call (in tune mode, on a communicator spanning "
     "processes, from its second: call 0 of every key there is NCCL's choice), without searching "
     "again, unless an override names it (overrides come first). A profile from another topology "
     "fingerprint or another NCCL version is refused with one message and the job runs as if "
     "none was given. Communicators are matched by their shape (ranks, nodes), not their ids.",
     0, 0, NULL, FIELD(profile)},
    {"AUTOHA_PROFILE_MAX_MB", AH_ENV_INT, "16", "1..4096 (MiB)",
     "The largest AUTOHA_PROFILE file a process reads; a larger one is refused with one line before "
     "any of it is read, and the job runs as if none was given. While a profile is parsed it "
     "takes about 10 bytes of memory per byte of the file (the text, jansson's tree and the "
     "report read from it: a 12 MB profile peaked at 129 MB), all freed once its configurations "
     "are taken, which keep under 100 bytes each. A report holds about 0.8 KB per key, so the "
     "default takes a profile of some 20,000 keys, at a passing cost of about 160 MB.",
     1, 4096, NULL, FIELD(profile_max_mb)},
    {"AUTOHA_JANSSON", AH_ENV_FILE, "", "a path to libjansson.so.4, or empty for the search",
     "Where autoha finds jansson, the library its reports and profiles are written and read with. "
     "autoha opens it at run time, and only in a process that writes or reads one: libautoha.so "
     "needs nothing beyond the C library, so it never brings a jansson into a process that has "
     "its own. Empty searches libjansson.so.4 beside libautoha.so (the wheel ships a copy there), "
     "then on the loader's usual path (Debian/Ubuntu package libjansson4). A path names the one "
     "file to open, and nothing else is tried. When none opens, one error names each file tried "
     "and why it failed, no report is written and no profile read, and the job runs on.",
     0, 0, NULL, FIELD(jansson)},
    {"AUTOHA_SYNC_WARN_S", AH_ENV_DOUBLE, "10", "0.001..86400 (seconds)",
     "A rank that waits this long for the leader's decision about a call logs what it waits for "
     "(communicator, key, call index) and keeps waiting: ranks never guess a configuration, "
     "because ranks that disagree would hang NCCL.",
     0.001, 86400, NULL, FIELD(sync_warn_s)},
    {"AUTOHA_SYNC_TIMEOUT_S", AH_ENV_DOUBLE, "300", "1..86400 (seconds)",
     "The bound on any wait for the leader's decision about a call. The leader commits a call "
     "when its own rank reaches it, so a wait this long means the leader's process is dead or "
     "hung and the collective cannot complete anyway: the rank logs one error, stops waiting "
     "and hands the call, and every later undecided call of that key, to NCCL's own choice, so "
     "the job fails (or its watchdog fires) inside NCCL as it would without autoha. It also bounds "
     "a communicator's wait for the hub's verdict (fixed mode: at its first call; tune mode: at a "
     "key's second) while the hub does not answer (its process frozen or cut off: the hub is "
     "tried for the whole job).",
     1, 86400, NULL, FIELD(sync_timeout_s)},
    {"AUTOHA_TUNE_BUDGET", AH_ENV_INT, AH_ENV_DEFAULT_TEXT(AH_TUNE_BUDGET_DEFAULT),
     "1..10000000 (calls)",
     "How many calls of one key the online search may spend probing configurations. A key that "
     "has not converged within its budget keeps the best configuration found so far, or NCCL's "
     "default when nothing beat it beyond noise; keys too rare to use their budget stay on "
     "NCCL's default.",
     1, 10000000, NULL, FIELD(tune_budget)},
    {"AUTOHA_COORD_ADDR", AH_ENV_STRING, "", "HOST:PORT, or empty",
     "Address of the job's coordinator hub. Normally empty: the process that creates the "
     "ncclUniqueId runs the hub and stamps its address and a job secret into the id, so every "
     "rank finds it whatever framework passes the id around. Set it when that process cannot be "
     "reached at the address it sees itself at (NAT, several interfaces).",
     0, 0, NULL, FIELD(coord_addr)},
    {"AUTOHA_COORD_IFNAME", AH_ENV_IFNAME, "",
     "PREFIX,PREFIX... or ^PREFIX,... or =NAME,... (as "
     "NCCL_SOCKET_IFNAME), or empty",
     "Which network interface's address the coordinator hub listens on and stamps into the "
     "ncclUniqueId for the other ranks to dial, when AUTOHA_COORD_ADDR is not set. The syntax is "
     "NCCL_SOCKET_IFNAME's: a comma-separated list of interface name prefixes (eth,ib), a leading ^ "
     "to take any interface but those (^docker,lo), a leading = to make the names exact (=eth0). "
     "The first interface that is up, has an IPv4 or a non-link-local IPv6 address and matches is "
     "taken. Empty, NCCL's default: an ib* interface, else any but docker* and lo*, else docker*, "
     "else lo*. A value that matches no interface logs one warning and falls back to that default. "
     "Setting it to NCCL_SOCKET_IFNAME's value puts the hub on the network NCCL's bootstrap uses. "
     "Read by the process that runs the hub.",
     0, 0, NULL, FIELD(coord_ifname)},
    {"AUTOHA_COORD_JOIN_S", AH_ENV_DOUBLE, AH_ENV_DEFAULT_TEXT(AH_COORD_JOIN_S_DEFAULT),
     "0.001..86400 (seconds)",
     "How long the coordinator hub waits, from the first rank's join, for every rank of a "
     "communicator that spans processes to join. When all have joined with the same autoha settings "
     "(mode, overrides, loaded profile) the communicator runs autoha's choices (tuned or fixed); "
     "otherwise (a process that cannot reach the hub, runs without autoha, or has other settings) "
     "every rank runs NCCL's own choices, so ranks never disagree, and one message says why. "
     "Each rank in fixed or tune mode waits for this verdict at the communicator's first "
     "collective. Read by the process that runs the hub.",
     0.001, 86400, NULL, FIELD(coord_join_s)},
    {"AUTOHA_COORD_RELAY", AH_ENV_BOOL, "1", "1|0 (also y|n, yes|no, on|off, true|false)",
     "Share one connection to the coordinator hub per host. The first process of a host (same job, "
     "same hub, same hostname) becomes the host's relay: it listens on a host-local abstract unix "
     "socket whose name is derived from the job secret and the hub's address, and the host's other "
     "processes reach the hub through it, each still proving the job secret to the hub itself. A "
     "decision then costs the hub one send per host instead of one per process (8 GPUs a host: 8 "
     "times fewer), which is what keeps its delivery within milliseconds at a thousand processes. "
     "When the relay exits or loses the hub, the others reconnect (one becomes the relay, or they "
     "dial the hub directly) without losing or repeating a decision. 0: every process connects to "
     "the hub directly.",
     0, 0, NULL, FIELD(coord_relay)},
    {"AUTOHA_HUB_MEM_MB", AH_ENV_INT, AH_ENV_DEFAULT_TEXT(AH_COORD_HUB_MEM_MB_DEFAULT),
     "16..1048576 (MiB)",
     "The coordinator hub's memory budget for what the job makes it keep: communicators and their "
     "members, rank bitmaps, retained decisions, progress and straggler records, search times being "
     "gathered, queue pairs and directory entries. These grow with the job; what would take the hub "
     "past the budget is refused with one line naming it and what runs instead (a communicator or "
     "a rank's join: NCCL's own choices for it; progress records: no hang diagnosis for it). A "
     "16,384-GPU job of TP8 x PP8 x DP256 took 23 MiB (bench/coord_scale, without straggler "
     "windows); a 131,072-GPU one takes about 185 MiB, plus 0.4 to 1.7 GiB of straggler windows "
     "(4 to 16 keys judged a communicator; docs/coordinator.md \"Scale and end-to-end "
     "tests\"). Send buffers have their own bound. Read by the process that runs the hub.",
     16, 1048576, NULL, FIELD(hub_mem_mb)},
    {"AUTOHA_HEALTH", AH_ENV_BOOL, "1", "1|0 (also y|n, yes|no, on|off, true|false)",
     "Live diagnosis of hangs, in every mode: each rank sends the coordinator hub a small progress "
     "record at most once a second for every communicator that spans processes (calls entered per "
     "collective and size bin, whether its GPU stream completed them), and the hub names the rank "
     "or ranks that hang a communicator (docs/diagnosis.md). 0 (off) sends nothing.",
     0, 0, NULL, FIELD(health)},
    {"AUTOHA_HANG_S", AH_ENV_DOUBLE, AH_ENV_DEFAULT_TEXT(AH_COORD_HANG_S_DEFAULT),
     "1..86400 (seconds)",
     "How long none of a communicator's ranks may advance before the hub diagnoses a hang and every "
     "process of the communicator logs one line naming the culprit. 60 s: NCCL RAS declares a "
     "peer dead after 60 s, and a finding comes well inside PyTorch's 10-minute NCCL watchdog. "
     "Pauses in which every rank waits outside NCCL (a checkpoint all ranks write, an evaluation) "
     "are never a hang; a pause of one rank while the others wait in a collective (rank 0 alone "
     "saving a checkpoint) is named after this long: set it above the longest such pause when "
     "AUTOHA_HEALTH_ACTION is abort. A rank whose process dies or stops responding is named within "
     "seconds, whatever this is. Read by the process that runs the hub.",
     1, 86400, NULL, FIELD(hang_s)},
    {"AUTOHA_STRAGGLER_PCT", AH_ENV_DOUBLE, AH_ENV_DEFAULT_TEXT(AH_COORD_STRAGGLER_PCT_DEFAULT),
     "0..50 (percent of a call's time)",
     "How late a rank must arrive, as a share of the call's time, before the hub names it a "
     "straggler: late by more than this, and by more than 4 times the spread of all ranks' lateness "
     "in the same call, in 12 of its latest 16 sampled calls of one key (a warning "
     "on every process of the communicator; another when its median lateness is under half the "
     "threshold again). 20: a rank that "
     "makes the others wait a fifth of each such call, several times the arrival jitter of a healthy "
     "job, whose ranks are early as often as late. 0 turns straggler detection off. Read by the "
     "process that runs the hub.",
     0, 50, NULL, FIELD(straggler_pct)},
    {"AUTOHA_STRAGGLER_AUDIT_S", AH_ENV_DOUBLE,
     AH_ENV_DEFAULT_TEXT(AH_COORD_STRAGGLER_AUDIT_S_DEFAULT), "0..3600 (seconds)",
     "How often the hub asks the processes of each communicator of three ranks or more to time "
     "24 consecutive calls of each of its 4 busiest keys (a settled key is otherwise timed once "
     "in 64 calls): the straggler window then holds calls of the last audit, so a rank that turns "
     "slow mid-job is named within about this long, and one that recovers is said to. The audited "
     "calls take the shim's full decision path; the others stay on its short path. 0 turns the "
     "audits off (a late straggler is then named after some 800 calls of a key). Read by the "
     "process that runs the hub.",
     0, 3600, NULL, FIELD(straggler_audit_s)},
    {"AUTOHA_SLOW_LINK_PCT", AH_ENV_DOUBLE, AH_ENV_DEFAULT_TEXT(AH_COORD_SLOW_LINK_PCT_DEFAULT),
     "0..50 (percent of the median connection's rate)",
     "How slow a connection (a queue pair NCCL sends on) must be, against the median connection of "
     "its communicator, before the hub names its link: every process times the work requests NCCL "
     "posts on its queue pairs, from post to completion, and sends the hub each one's bytes and "
     "busy time once a second; a connection whose rate is under this share of the median in 3 of "
     "its latest 4 windows is named a slow link (with its NIC, port and, with AUTOHA_QP_TOPO, the "
     "leaf-spine link), and every connection from or to one rank (two peers or more) its NIC or "
     "host (docs/diagnosis.md). 20: a flow sharing a link with up to three others by an ECMP "
     "collision runs at a quarter and is not named; a link degraded to 5% is. 0 turns it off, and "
     "NCCL's post and poll are then not wrapped for it. Read by every process (0: no timing) and by "
     "the process that runs the hub (the threshold).",
     0, 50, NULL, FIELD(slow_link_pct)},
    {"AUTOHA_HEALTH_ACTION", AH_ENV_ENUM, "log", "log|abort",
     "What a process does when the hub finds a hang on one of its communicators. log: the line only. "
     "abort: also revokes its ranks of that communicator (ncclCommRevoke, NCCL 2.28.7+), so every "
     "call waiting in it fails within a fraction of a second and the framework exits with an error "
     "an elastic launcher restarts on, instead of waiting for its watchdog; ranks stuck outside NCCL "
     "are ended by the launcher when the others exit.",
     0, 0, "log|abort", FIELD(health_action)},
    {"AUTOHA_HEALTH_CMD", AH_ENV_COMMAND, "", "a shell command, or empty",
     "A command each process runs (with /bin/sh -c, in the background, never waited for) for every "
     "finding of the hang diagnosis it receives, with the finding as one line of JSON on its standard "
     "input: {\"event\": \"autoha.health\", \"kind\", \"comm\", \"text\", \"time\", \"host\", "
     "\"pid\"} (docs/diagnosis.md). For an alerting hook or a log shipper.",
     0, 0, NULL, FIELD(health_cmd)},
    {"AUTOHA_STATUS_FILE", AH_ENV_PATH, "autoha-reports/%j/hub-%h-%p.cred",
     "PATH template (%h %p %r %j %%), or off",
     "Where the process that runs the job's coordinator hub writes its credentials (the hub's "
     "address and the job secret, mode 0600: only the job's user can read them) for `autoha status`, "
     "which shows the job's communicators, their ranks' progress and the current findings. The "
     "templates are those of AUTOHA_REPORT; by default the file sits beside the reports (in "
     "AUTOHA_REPORT's folder when that is set). off writes none (then autoha status cannot reach "
     "the hub).",
     0, 0, NULL, FIELD(status_file)},
    {"AUTOHA_QP", AH_ENV_BOOL, "1", "1|0 (also y|n, yes|no, on|off, true|false)",
     "Lets autoha set the UDP source port and the traffic class of the RoCE queue pairs NCCL "
     "creates, at the INIT to RTR transition. 0 (off) leaves every queue pair exactly as NCCL set "
     "it. InfiniBand queue pairs are never changed.",
     0, 0, NULL, FIELD(qp)},
    {"AUTOHA_QP_SPORT", AH_ENV_QP_SPORT, "off", "off|spread|plan|file:PATH",
     "How RoCE UDP source ports (the ECMP path) are chosen. off keeps NCCL's; spread spreads each "
     "(local GID, remote GID) pair's queue pairs evenly over the port space, the same on every run "
     "and rank; file:PATH reads a catalog of ports known to take distinct paths; plan assigns ports "
     "from a topology description so that uplink loads are balanced across the job.",
     0, 0, NULL, FIELD(qp_sport)},
    {"AUTOHA_QP_TC", AH_ENV_TC, "nccl", "nccl|0..255|dscp=0..63",
     "Traffic class (the switch priority queue) of the RoCE queue pairs: nccl keeps what NCCL "
     "sets (NCCL_IB_TC), a number is the whole traffic class byte, dscp=N sets DSCP N (traffic "
     "class N << 2) and keeps NCCL's ECN bits.",
     0, 0, NULL, FIELD(qp_tc)},
    {"AUTOHA_QP_TOPO", AH_ENV_PATH, "off", "PATH template (%h %p %r %%), or off",
     "The topology file AUTOHA_QP_SPORT=plan plans from: leaf pairs, spines, hosts and their NICs' "
     "addresses, the jobs with their GPU intensity and traffic pattern, failed links (format in "
     "docs/qp.md). Every rank must read the same file, so every rank computes the same plan. "
     "AUTOHA_HA=path also reads it to give each shadow a source port whose modelled spine differs "
     "from both directions of its primary. Queue pairs come before the rank is known, so %r "
     "expands to 'all'.",
     0, 0, NULL, FIELD(qp_topo)},
    {"AUTOHA_QP_METHOD", AH_ENV_ENUM, "label", "label|mlx5dv",
     "How the chosen source port reaches the NIC. label writes the flow label that the kernel "
     "turns into that port at the RTR transition (any RoCEv2 driver that honours the flow label); "
     "mlx5dv calls mlx5dv_modify_qp_udp_sport after RTS instead (rdma-core 33+, ConnectX firmware "
     "with the RTS-to-RTS source-port capability) and falls back to label when libmlx5 lacks it.",
     0, 0, "label|mlx5dv", FIELD(qp_method)},
    {"AUTOHA_QP_TC_COMM", AH_ENV_TC_RULES, "",
     "MATCH:CLASS[;MATCH:CLASS...], MATCH = name=GLOB|ranks=N[-M]|*",
     "Per-communicator traffic classes, through ncclConfig_t.trafficClass (NCCL 2.26+) of "
     "communicators created with ncclCommInitRankConfig that leave the field unset: the first rule "
     "matching the communicator's commName (NCCL 2.27+, a glob) or its size gives the class (0..255, "
     "or dscp=N). E.g. 'name=dp*:dscp=10;ranks=2-8:dscp=26'. Unmatched communicators get "
     "AUTOHA_QP_TC. NCCL_IB_TC, when set, wins inside NCCL, and AUTOHA_QP_TC (when set) is also "
     "written into every RoCE QP by the QP hook; leave it at nccl for per-communicator classes.",
     0, 0, NULL, FIELD(qp_tc_comm)},
    {"AUTOHA_HA", AH_ENV_ENUM, "off", "off|path|port|nic",
     "Transparent RDMA failover (docs/ha.md): every RC queue pair NCCL connects gets a shadow queue "
     "pair, connected through the coordinator hub on a backup path, and a path failure of the "
     "primary (transport retries exhausted) moves its traffic to the shadow with the work requests "
     "in flight replayed exactly once, so NCCL sees no error. path: the shadow uses the same port "
     "with another UDP source port (another ECMP route; covers switch links); port: the other port "
     "of a dual-port NIC (covers a port, its cable and its leaf; a single-port NIC gets no shadow, "
     "and one line says to use nic); nic: another NIC of the host among the devices NCCL_IB_HCA "
     "selects, the nearest in its PCI topology as sysfs shows it: on the same PCIe switch, else "
     "the same NUMA node, else any, ties by the device list's order (covers the whole NIC, its "
     "ports and its leaves; NCCL's memory registrations are mirrored there and remote keys "
     "translated through the hub). off (the default) leaves the data path alone: a shadow doubles the queue pairs, and a "
     "job gains nothing from it unless every rank runs autoha with the hub reachable, so it is "
     "asked for. Only NCCL's queue pairs (the verbs it resolves with dlvsym) are shadowed; a program "
     "calling libibverbs directly is never changed.",
     0, 0, "off|path|port|nic", FIELD(ha)},
    {"AUTOHA_HA_CONNECT_S", AH_ENV_DOUBLE, "30", "0.1..3600 (seconds)",
     "How long autoha's background thread waits for the peer of a queue pair to publish its shadow "
     "in the hub. A peer without autoha or with AUTOHA_HA=off publishes none: both ends then run "
     "without a shadow for that connection (a shadow is used only once a heartbeat on it has "
     "completed, which needs both ends).",
     0.1, 3600, NULL, FIELD(ha_connect_s)},
    {"AUTOHA_HA_FAILOVER_S", AH_ENV_DOUBLE, "10", "0.1..3600 (seconds)",
     "How long a failover may wait for the peer's count of delivered messages through the hub. "
     "Past it NCCL gets the failed completion it would have had without autoha, so a failure "
     "that cannot be repaired ends the job within the hardware retry time plus this bound.",
     0.1, 3600, NULL, FIELD(ha_failover_s)},
    {"AUTOHA_HA_SOFT_TIMEOUT_S", AH_ENV_DOUBLE, "0", "0..3600 (seconds; 0: auto)",
     "A failover without an error: when the oldest signalled work request of the queue pair that "
     "carries a connection's traffic has not completed for this long, autoha fails it over as if "
     "its transport retries had run out (a silent stall the hardware never reports). 0 (auto) "
     "takes twice the queue pair's own RC retry window, 4.096 us x 2^timeout x (retry_cnt + 1): "
     "68 s with NCCL's defaults, well above it, so only a stall RC does not end is caught.",
     0, 3600, NULL, FIELD(ha_soft_timeout_s)},
    {"AUTOHA_HA_DEGRADE", AH_ENV_DOUBLE, "4", "0..1000 (a ratio; 0: off)",
     "With AUTOHA_HA=path, AUTOHA_QP_SPORT=plan and a topology's job line: a queue pair whose "
     "completion time (its signalled work requests outstanding over their completion rate, sampled "
     "by the background thread every 100 ms, never on the data path) is at least this many times the "
     "median of its peers (the other queue pairs of its NIC and one sample from each other process of "
     "the job, swapped through the hub) for 3 windows in a row is taken to run over a "
     "degraded link: the leaf-spine links its planned route crosses are published as degraded, and "
     "the rebalance re-plans the flows on them and moves this process's queue pairs live "
     "(mlx5dv_modify_qp_udp_sport). 0 turns the detection off; below about 2 normal jitter trips it.",
     0, 1000, NULL, FIELD(ha_degrade)},
    {"AUTOHA_HA_DEGRADE_S", AH_ENV_DOUBLE, "1", "0.2..60 (seconds)",
     "The window of AUTOHA_HA_DEGRADE's completion-time measurement: each queue pair's estimate "
     "covers this long, so a degraded link is acted on after 3 such windows.",
     0.2, 60, NULL, FIELD(ha_degrade_s)},
    {"AUTOHA_HA_IB_TIMEOUT", AH_ENV_INT, "14", "0..31 (0: NCCL's own)",
     "With AUTOHA_HA on: the RC timeout exponent autoha gives each queue pair it protects (NCCL's "
     "and its shadows) when NCCL takes it to RTS, where NCCL's own (NCCL_IB_TIMEOUT, 20 by "
     "default) is longer; never a longer one. A path failure costs one RC retry window, 4.096 us x "
     "2^timeout x (retry_cnt + 1), before its error reaches autoha: 34 s at NCCL's 20 and 7, 0.54 s "
     "at 14 and 7, so a failover stalls a job for about half a second instead of half a minute. "
     "The soft timeout's auto value follows (twice the window). The cost: a path that drops "
     "everything for longer than the window (a switch reboot, a long flap) ends the queue pair "
     "sooner, which its shadow covers; a connection whose peer runs no autoha has no shadow and "
     "gets the shorter window too. 0 leaves NCCL's timeout as it is.",
     0, 31, NULL, FIELD(ha_ib_timeout)},
    {"AUTOHA_HA_IB_RETRY_CNT", AH_ENV_INT, "7", "0..7",
     "With AUTOHA_HA on: the RC retry count autoha gives each queue pair it protects at RTS, "
     "where NCCL's own (NCCL_IB_RETRY_CNT, 7 by default) is higher; never a higher one. With "
     "AUTOHA_HA_IB_TIMEOUT it sets the retry window; 7 keeps NCCL's count (a lost packet is "
     "retried as often as without autoha, only sooner).",
     0, 7, NULL, FIELD(ha_ib_retry_cnt)},
    {"AUTOHA_HA_HEARTBEAT_MS", AH_ENV_INT, "2000", "20..60000 (milliseconds)",
     "How often autoha sends a heartbeat (a signalled 0-byte RDMA write) on each ready standby "
     "shadow, one work request per connection, nothing on the queue pair carrying the traffic. A "
     "heartbeat not completed by the next one is a miss (AUTOHA_HA_HEARTBEAT_MISS); a failed one "
     "ends the standby at once (its queue pair is in error). Shorter finds a standby cut by a "
     "fault sooner, so a later failover does not wait for it to be rebuilt; each costs one tiny "
     "write per standby.",
     20, 60000, NULL, FIELD(ha_hb_ms)},
    {"AUTOHA_HA_HEARTBEAT_MISS", AH_ENV_RATIO, "1/1", "N/M (1 <= N <= M <= 32)",
     "A standby shadow is taken for dead, given up and rebuilt, when N of its last M heartbeats "
     "missed (not completed within AUTOHA_HA_HEARTBEAT_MS: its path is dropping them and RC is "
     "retrying). 1/1, the default, gives up a standby at its first late heartbeat; 3/5 rides out "
     "a short flap of its path. A heartbeat that fails (RC's retries ran out) ends the standby "
     "whatever this says: an RC queue pair in error carries nothing.",
     0, 32, NULL, FIELD(ha_hb_miss)},
    {"AUTOHA_HA_FAILBACK", AH_ENV_BOOL, "0", "1|0 (also y|n, yes|no, on|off, true|false)",
     "With AUTOHA_HA on: once the path a connection failed over from is back (its standby there "
     "ready and its heartbeats on time for 5 s), move the traffic back to it with one planned "
     "failover (a drain and replay, a stall of milliseconds). Off (the default): the traffic stays "
     "where it went and the recovered path becomes the standby, so no second stall is taken and a "
     "flapping path costs one failover per fault, not two; the price is the load the failover "
     "moved (under port or nic, two flows on one port or NIC) until the job ends (docs/ha.md, "
     "\"Failback\").",
     0, 0, NULL, FIELD(ha_failback)},
    {"AUTOHA_ETCD", AH_ENV_ETCD, "", "http://HOST:PORT[,http://HOST:PORT...], or empty",
     "The client URLs of the site's etcd cluster, for the cluster planner's ground "
     "(docs/cluster.md): a job registers under a lease, and one planner is elected. Give every "
     "member: a request that fails on one (refused, timed out, no raft leader) goes to the next, "
     "and each call is bounded by AUTOHA_ETCD_TIMEOUT_S, so etcd down is an error, never a hang. "
     "Only http:// is taken. libcurl (libcurl.so.4) and jansson are opened only by a process "
     "given this variable. Empty, the default: no etcd. Today only the cluster client library "
     "(cluster/) and its tests use it: no hub registers its job yet.",
     0, 0, NULL, FIELD(etcd)},
    {"AUTOHA_ETCD_TIMEOUT_S", AH_ENV_DOUBLE, "5", "0.05..3600 (seconds)",
     "The bound on one etcd call, over every member it tries: each try gets a share of what is "
     "left, at most a quarter of the bound (at least 100 ms while that much is left), and a round "
     "in which no member answered is tried again after 100 ms until the bound. 5: after the raft "
     "leader's death the others elect a new one within two election timeouts (2 s by default), "
     "and a write sent to a member before that waits there unanswered, so the call must outlast "
     "the election and come back to the members.",
     0.05, 3600, NULL, FIELD(etcd_timeout_s)},
    {"AUTOHA_ETCD_TTL_S", AH_ENV_INT, "10", "2..3600 (seconds)",
     "The TTL of the etcd lease a job's registration and a planner candidate hold, renewed every "
     "third of it: a process that dies disappears from etcd within this long, and a planner that "
     "dies is replaced within about this long plus half a second. etcd raises a TTL under its "
     "minimum (about 1.5 times its election timeout).",
     2, 3600, NULL, FIELD(etcd_ttl_s)},
    {"AUTOHA_ETCD_PREFIX", AH_ENV_PREFIX, "/autoha/", "/NAME/ (printable ASCII, no spaces)",
     "Where autoha's keys live in etcd: PREFIXjobs/JOB for each job's registration, PREFIXplanner "
     "for the election. Give sites that share an etcd cluster different prefixes.",
     0, 0, NULL, FIELD(etcd_prefix)},
    {"AUTOHA_TORCH_VENV", AH_ENV_TEXT, "~/.cache/autoha/venv-torch", "a folder",
     "Read by scripts/torch-venv, not by the library: the Python venv it installs PyTorch into for "
     "tests/torch ($XDG_CACHE_HOME/autoha/venv-torch when that is set).",
     0, 0, NULL, FIELD(torch_venv)},
    {"AUTOHA_FUZZ_SECONDS", AH_ENV_INT, "30", "0..86400 (seconds)",
     "Read by scripts/test, not by "
     "the library: how long each fuzz target runs under libFuzzer after the tests (scripts/fuzz). 0 "
     "skips the fuzzing.",
     0, 86400, NULL, FIELD(fuzz_seconds)},
};

#define NVARS ((int)(sizeof env_table / sizeof env_table[0]))

int ah_env_var_count(void) { return NVARS; }

const ah_env_var_t *ah_env_var_get(int i) { return i >= 0 && i < NVARS ? &env_table[i] : NULL; }

const ah_env_var_t *ah_env_var_find(const char *name) {
  for (int i = 0; name && i < NVARS; i++)
    if (strcmp(env_table[i].name, name) == 0) return &env_table[i];
  return NULL;
}

const char *ah_env_mode_name(int mode) {
  static const char *const names[] = {"observe", "fixed", "tune"};
  return mode >= 0 && mode < 3 ? names[mode] : "?";
}
