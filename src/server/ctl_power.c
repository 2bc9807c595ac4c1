/*
 * ctl_power.c - idle on-prem nodes powered down, and up again ahead of
 * demand, through an operator's command (IPMI, Redfish, a script).
 *
 * With a power command configured (cnlabd --power-command), a node the
 * scheduler reports idle for the idle time (its POWER_DOWN decisions:
 * bin-packing leaves whole nodes empty) is powered down when
 *
 *   - its cluster keeps at least the spare capacity powered on and idle
 *     without it (--power-spare-gpus), and
 *   - its cluster's forecast demand 90 s ahead fits the capacity left
 *     without it (ctl_cluster.c).
 *
 * The command runs as `COMMAND off NODE` (or `on`), with CNLAB_NODE and
 * CNLAB_NODE_ADDRESS in its environment, in the background: the control
 * loop never waits for it; its exit is collected on later ticks.  While
 * a node is off (or being switched on), the scheduler places nothing on
 * it and its silence is not a loss.
 *
 * A node is powered up when its cluster's forecast demand exceeds the
 * capacity that is on (or work waits that no node on can start), one
 * node per cluster per tick, the smallest that covers the excess; it
 * counts as on again at its agent's first heartbeat after the command
 * (ctl_node.c).  A command that fails leaves the node as it was, and an
 * "on" that brings no heartbeat within POWER_ON_WAIT_MS is given up
 * (tried again later).  A change is recorded before its command runs;
 * a command runs at most POWER_CMD_MAX_MS (its process group is killed
 * then, which counts as a failure); a failed "on" whose node's agent is
 * back anyway changes nothing.  A node is switched off only when it holds
 * nothing at all (no allocation, no other scheduler's pods, no workload
 * of ours still leaving it).
 *
 * Every transition is audited (action node.power) and shown in nodes
 * list ("power": on, off, powering-on) and in the node's document, so a
 * restarted cnlabd knows which nodes are off.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "sched/pick.h"
#include "server/ctl-internal.h"

#define POWER_ON_WAIT_MS (10 * 60 * 1000) /* boot, then the agent */
#define POWER_CMD_MAX_MS (5 * 60 * 1000)  /* a command running longer dies */
#define POWER_RETRY_MS   60000            /* after a failed command */

extern char **environ;

static void audit_power(struct cnl_ctl *ctl, const struct node *n, int64_t now,
                        const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void audit_power(struct cnl_ctl *ctl, const struct node *n, int64_t now,
                        const char *fmt, ...)
{
	struct cnl_store_audit a = {0};
	va_list ap;

	a.ts_ms = now;
	snprintf(a.actor, sizeof(a.actor), "scheduler");
	snprintf(a.action, sizeof(a.action), "node.power");
	snprintf(a.target, sizeof(a.target), "%s", n->name);
	va_start(ap, fmt);
	vsnprintf(a.result, sizeof(a.result), fmt, ap);
	va_end(ap);
	if (cnl_store_audit_append(ctl->store, &a, NULL) < 0)
		cnl_log(CNL_LOG_ERROR, "cannot audit a power change", "node=%s",
		        n->name);
	cnl_log(CNL_LOG_INFO, "node power", "node=%s %s", n->name, a.result);
}

/* Start `COMMAND VERB NODE` in the background, in a process group of its
 * own, with the signals cnlabd blocks unblocked (a timeout in the script
 * works); its pid, or -errno. */
static pid_t spawn(struct cnl_ctl *ctl, const struct node *n, const char *verb)
{
	char env_node[CNL_STORE_NAME_MAX + 16], env_addr[160];
	char *argv[] = {(char *)ctl->cfg.power_command, (char *)verb,
	                (char *)n->name, NULL};
	posix_spawnattr_t at;
	sigset_t none, all;
	char **env;
	size_t ne = 0;
	pid_t pid;
	int r;

	while (environ[ne])
		ne++;
	env = cnl_xcalloc(ne + 3, sizeof(*env));
	memcpy(env, environ, ne * sizeof(*env));
	snprintf(env_node, sizeof(env_node), "CNLAB_NODE=%s", n->name);
	snprintf(env_addr, sizeof(env_addr), "CNLAB_NODE_ADDRESS=%s",
	         n->address);
	env[ne] = env_node;
	env[ne + 1] = env_addr;
	sigemptyset(&none);
	sigfillset(&all);
	if ((r = posix_spawnattr_init(&at)) == 0) {
		posix_spawnattr_setsigmask(&at, &none);
		posix_spawnattr_setsigdefault(&at, &all);
		posix_spawnattr_setpgroup(&at, 0);
		posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
		                                  POSIX_SPAWN_SETSIGDEF |
		                                  POSIX_SPAWN_SETPGROUP);
		r = posix_spawn(&pid, ctl->cfg.power_command, NULL, &at, argv,
		                env);
		posix_spawnattr_destroy(&at);
	}
	free(env);
	return r ? -r : pid;
}

/* Node @i's power changes to @p (saved with the node; the scheduler's
 * view follows).  0, or a store error with nothing changed. */
static int set_power(struct cnl_ctl *ctl, size_t i, uint8_t p, int64_t now)
{
	struct node *n = &ctl->nodes[i], next = *n;
	int r;

	next.power = p;
	next.power_ms = now;
	if ((r = ctl_node_save(ctl, &next, now)) < 0)
		return r;
	n->power = p;
	n->power_ms = now;
	ctl_node_states(ctl);
	if (p == PW_ON && n->state == N_UP)
		cnl_cluster_set_node_state(ctl->cluster, (uint32_t)i,
		                           CNL_NODE_UP);
	ctl_node_changed(ctl, (int)i);
	ctl->dirty = true;
	return 0;
}

/*
 * Node @i goes to @p (PW_OFF or PW_WAKING) through the command: recorded
 * first, so that a node is never switched unrecorded; a command that
 * cannot start puts the record back.  0, or -1 (audited).
 */
static int switch_node(struct cnl_ctl *ctl, size_t i, uint8_t p, int64_t now)
{
	struct node *n = &ctl->nodes[i];
	uint8_t was = n->power;
	pid_t pid;

	if (set_power(ctl, i, p, now) < 0)
		return -1;
	if ((pid = spawn(ctl, n, p == PW_OFF ? "off" : "on")) < 0) {
		audit_power(ctl, n, now,
		            "%s failed: cannot run the power command: %s",
		            p == PW_OFF ? "off" : "on", strerror((int)-pid));
		set_power(ctl, i, was, now);
		n->power_retry_ms = now + POWER_RETRY_MS;
		return -1;
	}
	n->power_pid = pid;
	n->power_cmd = p;
	n->power_cmd_ms = now;
	return 0;
}

/* Collect finished commands (judged by what each was asked to do): a
 * failed one undoes its change, unless the node's agent is back; one
 * running past POWER_CMD_MAX_MS is killed, its group with it. */
static void reap(struct cnl_ctl *ctl, int64_t now)
{
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		struct node *n = &ctl->nodes[i];
		const char *what = n->power_cmd == PW_OFF ? "off" : "on";
		int status;
		pid_t w;

		if (n->power_pid <= 0)
			continue;
		w = waitpid(n->power_pid, &status, WNOHANG);
		if (w == 0) {
			if (now - n->power_cmd_ms > POWER_CMD_MAX_MS)
				kill(-n->power_pid, SIGKILL); /* reaped next */
			continue;
		}
		n->power_pid = 0;
		if (w < 0)
			continue; /* not ours to reap any more */
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			audit_power(
			    ctl, n, now, "%s: the power command succeeded",
			    n->power_cmd == PW_OFF ? "off" : "powering on");
			continue;
		}
		n->power_retry_ms = now + POWER_RETRY_MS;
		if (n->power_cmd == PW_WAKING && n->power == PW_ON) {
			audit_power(ctl, n, now,
			            "on: the power command failed (%s %d), but "
			            "the node's agent is back",
			            WIFEXITED(status) ? "exit" : "signal",
			            WIFEXITED(status) ? WEXITSTATUS(status)
			                              : WTERMSIG(status));
			continue;
		}
		audit_power(
		    ctl, n, now,
		    "%s failed: the power command %s %d; the node stays "
		    "%s",
		    what, WIFEXITED(status) ? "exited" : "was killed by signal",
		    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
		    n->power_cmd == PW_OFF ? "on" : "off");
		set_power(ctl, i, n->power_cmd == PW_OFF ? PW_ON : PW_OFF, now);
	}
}

static int node_gpus(const struct cnl_ctl *ctl, size_t i)
{
	return ctl->cluster->nodes[i].n_gpus;
}

/* Whether node @i holds nothing at all: no allocation, no other
 * scheduler's work, no workload of ours still leaving it. */
static bool empty(const struct cnl_ctl *ctl, size_t i)
{
	const struct cnl_node *cn = &ctl->cluster->nodes[i];

	if (cn->n_allocs || cn->pods_others || cn->cpu_others || cn->mem_others)
		return false;
	for (size_t k = 0; k < ctl->n_wl; k++)
		if (ctl->wl[k].node == (int)i)
			return false;
	return true;
}

void ctl_power_tick(struct cnl_ctl *ctl, int64_t now)
{
	struct cnl_picks p;
	int64_t *idle_on;
	double *cap_left;

	if (!ctl->cfg.power_command)
		return;
	reap(ctl, now);
	/* Nodes switched on that never came back; those that did. */
	for (size_t i = 0; i < ctl->n_nodes; i++) {
		struct node *n = &ctl->nodes[i];

		if (n->power_back) {
			n->power_back = false;
			audit_power(ctl, n, now,
			            "on: its agent is back; it takes work");
		}
		if (n->power == PW_WAKING && !n->power_pid &&
		    now - n->power_ms > POWER_ON_WAIT_MS) {
			audit_power(ctl, n, now,
			            "on given up: no heartbeat %d s after the "
			            "command; the node stays off",
			            POWER_ON_WAIT_MS / 1000);
			set_power(ctl, i, PW_OFF, now);
		}
	}
	if (cnl_picks_scan(ctl->cluster, NULL, 0, &p) < 0)
		return;
	/* Per cluster: GPUs on, idle and taking work (the spare), and the
	 * capacity left on as nodes go off in this tick. */
	idle_on = cnl_xcalloc(p.n + 1, sizeof(*idle_on));
	cap_left = cnl_xcalloc(p.n + 1, sizeof(*cap_left));
	for (size_t k = 0; k < p.n; k++)
		cap_left[k] = (double)p.load[k].blocks_total;
	for (size_t i = 0; i < ctl->n_nodes && i < p.n_nodes; i++) {
		const struct cnl_node *cn = &ctl->cluster->nodes[i];

		if (ctl->nodes[i].power == PW_ON && cn->state == CNL_NODE_UP &&
		    !cn->n_allocs)
			idle_on[p.of_node[i]] += cn->n_gpus;
	}
	/* Down: idle past the idle time, spare and forecast allowing. */
	for (size_t i = 0; i < ctl->n_nodes && i < p.n_nodes; i++) {
		struct node *n = &ctl->nodes[i];
		size_t k = p.of_node[i];
		double cap = (double)p.load[k].blocks_total,
		       need = ctl_forecast_demand(ctl, p.name[k], cap),
		       gone = 100.0 * node_gpus(ctl, i);

		if (!n->power_idle || n->power != PW_ON || n->power_pid ||
		    n->cloud || n->state != N_UP || now < n->power_retry_ms ||
		    !empty(ctl, i))
			continue;
		if (idle_on[k] - node_gpus(ctl, i) <
		        ctl->cfg.power_spare_gpus ||
		    need > cap_left[k] - gone)
			continue;
		if (switch_node(ctl, i, PW_OFF, now) < 0)
			continue;
		idle_on[k] -= node_gpus(ctl, i);
		cap_left[k] -= gone;
		audit_power(ctl, n, now,
		            "off: idle since %" PRId64 " s ago; %" PRId64
		            " idle GPUs stay on in cluster %s (spare %" PRId64
		            "), its forecast demand %.0f of %.0f blocks",
		            (now - n->power_idle_since) / 1000, idle_on[k],
		            p.name[k], ctl->cfg.power_spare_gpus, need,
		            cap_left[k]);
	}
	/* Up: per cluster, the smallest node off that covers the excess
	 * beyond what is on and what is being switched on. */
	for (size_t k = 0; k < p.n; k++) {
		double cap = cap_left[k],
		       need = ctl_forecast_demand(
		           ctl, p.name[k], (double)p.load[k].blocks_total),
		       coming = 0;
		int best = -1;
		bool any_off = false;

		for (size_t i = 0; i < ctl->n_nodes && i < p.n_nodes; i++) {
			if (p.of_node[i] != k)
				continue;
			if (ctl->nodes[i].power == PW_WAKING)
				coming += 100.0 * node_gpus(ctl, i);
			any_off |= ctl->nodes[i].power == PW_OFF;
		}
		/* (The starved test reads every workload: only where a node
		 * could be switched on.) */
		if (!any_off)
			continue;
		if (coming > 0
		        ? need <= cap + coming
		        : need <= cap && !ctl_cluster_starved(ctl, p.name[k]))
			continue;
		cap += coming;
		for (size_t i = 0; i < ctl->n_nodes && i < p.n_nodes; i++) {
			const struct node *n = &ctl->nodes[i];

			if (p.of_node[i] != k || n->power != PW_OFF ||
			    n->cloud || n->power_pid || now < n->power_retry_ms)
				continue;
			if (best < 0 ||
			    (100.0 * node_gpus(ctl, i) >= need - cap &&
			     (100.0 * node_gpus(ctl, (size_t)best) <
			          need - cap ||
			      node_gpus(ctl, i) <
			          node_gpus(ctl, (size_t)best))))
				best = (int)i;
		}
		if (best < 0 ||
		    switch_node(ctl, (size_t)best, PW_WAKING, now) < 0)
			continue;
		audit_power(ctl, &ctl->nodes[best], now,
		            "powering on: cluster %s's forecast demand %.0f "
		            "blocks exceeds the %.0f it has on",
		            p.name[k], need, cap);
	}
	free(idle_on);
	free(cap_left);
	cnl_picks_done(&p);
}

void ctl_power_idle(struct cnl_ctl *ctl, int node, int64_t since)
{
	if (node < 0 || (size_t)node >= ctl->n_nodes)
		return;
	ctl->nodes[node].power_idle = true;
	ctl->nodes[node].power_idle_since = since;
}
