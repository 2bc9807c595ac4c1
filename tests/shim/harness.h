/*
 * harness.h - what the shim's cmocka tests share: a scratch directory, and
 * child processes running tests/shim/shimtest with the shim preloaded, the
 * fake GPU state and a region named in their environment, talked to over
 * pipes (one command line in, one answer line out).
 *
 * The harness itself may be built with sanitizers; the children never are
 * (the shim, the fakes and shimtest are built without them).  Files that
 * include this define _GNU_SOURCE before any system header.
 */
#ifndef CNL_TESTS_SHIM_HARNESS_H
#define CNL_TESTS_SHIM_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct child {
	pid_t pid;
	FILE *in;  /* to the child's stdin */
	FILE *out; /* from the child's stdout */
};

static char scratch[256];

static __attribute__((unused)) void scratch_init(const char *name)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(scratch, sizeof(scratch), "%s/cnl-%s-XXXXXX",
	         tmp && *tmp ? tmp : "/tmp", name);
	if (!mkdtemp(scratch)) {
		perror("mkdtemp");
		exit(1);
	}
}

static __attribute__((unused)) void scratch_path(char *buf, size_t cap,
                                                 const char *leaf)
{
	snprintf(buf, cap, "%s/%s", scratch, leaf);
}

static __attribute__((unused)) void scratch_done(void)
{
	char cmd[300];

	/* Only our own mkdtemp directory. */
	snprintf(cmd, sizeof(cmd), "%s", scratch);
	if (fork() == 0) {
		execlp("rm", "rm", "-rf", cmd, (char *)NULL);
		_exit(127);
	}
	wait(NULL);
}

/*
 * Start the program exe (shimtest, or another test program) with args;
 * env_extra is a NULL-terminated list of
 * NAME=value strings added to (and overriding) our environment, with the
 * shim preloaded unless preload is 0.
 */
static __attribute__((unused)) struct child spawn_exe(const char *exe,
                                                      char *const args[],
                                                      char *const env_extra[],
                                                      int preload)
{
	int to[2], from[2];
	struct child c = {0};
	char *env[256];
	char preload_var[512];
	char *argv[16];
	size_t n = 0, a = 0;

	snprintf(preload_var, sizeof(preload_var), "LD_PRELOAD=%s", SHIM_SO);
	for (char **e = environ; *e && n < 200; e++) {
		int skip = strncmp(*e, "LD_PRELOAD=", 11) == 0;
		for (size_t i = 0; env_extra && env_extra[i]; i++) {
			size_t k = strcspn(env_extra[i], "=") + 1;
			if (strncmp(*e, env_extra[i], k) == 0)
				skip = 1;
		}
		if (!skip)
			env[n++] = *e;
	}
	for (size_t i = 0; env_extra && env_extra[i] && n < 250; i++)
		env[n++] = env_extra[i];
	if (preload)
		env[n++] = preload_var;
	env[n] = NULL;
	argv[a++] = (char *)exe;
	for (size_t i = 0; args[i] && a < 15; i++)
		argv[a++] = args[i];
	argv[a] = NULL;

	if (pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0) {
		perror("pipe");
		exit(1);
	}
	c.pid = fork();
	if (c.pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		execve(exe, argv, env);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	c.in = fdopen(to[1], "w");
	c.out = fdopen(from[0], "r");
	return c;
}

/* spawn_exe of tests/shim/shimtest. */
static __attribute__((unused)) struct child
spawn(char *const args[], char *const env_extra[], int preload)
{
	return spawn_exe(SHIMTEST, args, env_extra, preload);
}

/* Send one command line and read one answer line into buf. */
static __attribute__((unused)) int ask(struct child *c, const char *cmd,
                                       char *buf, size_t cap)
{
	fprintf(c->in, "%s\n", cmd);
	fflush(c->in);
	if (!fgets(buf, (int)cap, c->out))
		return -1;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

static __attribute__((unused)) int read_line(struct child *c, char *buf,
                                             size_t cap)
{
	if (!fgets(buf, (int)cap, c->out))
		return -1;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* Wait for the child and return its exit status (128+sig if killed). */
static __attribute__((unused)) int reap(struct child *c)
{
	int st = 0;

	if (c->in)
		fclose(c->in);
	while (waitpid(c->pid, &st, 0) < 0 && errno == EINTR)
		;
	if (c->out)
		fclose(c->out);
	c->in = c->out = NULL;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static __attribute__((unused)) void kill9(struct child *c)
{
	kill(c->pid, SIGKILL);
	reap(c);
}

/* Run shimtest to completion; returns its exit status. */
static __attribute__((unused)) int run(char *const args[],
                                       char *const env_extra[])
{
	struct child c = spawn(args, env_extra, 1);

	return reap(&c);
}

static __attribute__((unused)) void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
	                      .tv_nsec = (long)(ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

#endif /* CNL_TESTS_SHIM_HARNESS_H */
