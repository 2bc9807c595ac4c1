/*
 * test_oci.c - a workload's config.json (agent/oci.h): what the container
 * may do is decided here, so each promise of the header is read back from
 * the document: the id map (never host root), no capability, no_new_privs,
 * the seccomp refusals, the namespaces, a read-only root, exactly the
 * caller's environment, the mounts; and each refusal of a bad spec.  The
 * containers themselves run in integration.containers.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/agent-internal.h"
#include "agent/oci.h"

static const char *const argv_[] = {"/bin/sh", "-c", "echo hi", NULL};
static const char *const env_[] = {"PATH=/usr/bin:/bin", "HOME=/workspace",
                                   NULL};
static const struct cnl_oci_mount mounts_[] = {
    {"/workspace", "/srv/w/jobs/j1", "bind", false, NULL},
    {"/opt/cnlab/libcnlab-cuda.so", "/usr/lib/cnlab/libcnlab-cuda.so", "bind",
     true, NULL},
};

static struct cnl_oci_spec spec(void)
{
	return (struct cnl_oci_spec){
	    .argv = argv_,
	    .env = env_,
	    .cwd = "/workspace",
	    .hostname = "cnlab",
	    .rootfs = "rootfs",
	    .host_id_base = 1065536,
	    .mounts = mounts_,
	    .n_mounts = 2,
	};
}

static json_t *config(const struct cnl_oci_spec *s)
{
	json_t *doc = NULL;
	char err[200] = "";

	assert_int_equal(cnl_oci_config(s, &doc, err, sizeof(err)), 0);
	assert_non_null(doc);
	return doc;
}

static bool has_ns(json_t *doc, const char *type)
{
	json_t *ns =
	           json_object_get(json_object_get(doc, "linux"), "namespaces"),
	       *it;
	size_t i;

	json_array_foreach (ns, i, it) {
		if (strcmp(json_string_value(json_object_get(it, "type")),
		           type) == 0)
			return true;
	}
	return false;
}

static json_t *mount_at(json_t *doc, const char *dest)
{
	json_t *m, *it;
	size_t i;

	m = json_object_get(doc, "mounts");
	json_array_foreach (m, i, it) {
		if (strcmp(
		        json_string_value(json_object_get(it, "destination")),
		        dest) == 0)
			return it;
	}
	return NULL;
}

static bool has_option(json_t *mount, const char *opt)
{
	json_t *it;
	size_t i;

	json_array_foreach (json_object_get(mount, "options"), i, it) {
		if (strcmp(json_string_value(it), opt) == 0)
			return true;
	}
	return false;
}

static void test_ids_never_host_root(void **state)
{
	struct cnl_oci_spec s = spec();
	json_t *doc = config(&s), *lx = json_object_get(doc, "linux");
	json_t *user = json_object_get(json_object_get(doc, "process"), "user");

	assert_true(has_ns(doc, "user"));
	for (int k = 0; k < 2; k++) {
		json_t *maps =
		    json_object_get(lx, k ? "gidMappings" : "uidMappings");
		json_t *m = json_array_get(maps, 0);

		assert_int_equal(json_array_size(maps), 1);
		assert_int_equal(
		    json_integer_value(json_object_get(m, "containerID")), 0);
		assert_int_equal(
		    json_integer_value(json_object_get(m, "hostID")), 1065536);
		assert_int_equal(json_integer_value(json_object_get(m, "size")),
		                 CNL_OCI_ID_COUNT);
	}
	/* The command is not even the container's root. */
	assert_int_equal(json_integer_value(json_object_get(user, "uid")),
	                 CNL_OCI_TENANT_ID);
	assert_int_equal(json_integer_value(json_object_get(user, "gid")),
	                 CNL_OCI_TENANT_ID);
	json_decref(doc);
}

static void test_no_privileges(void **state)
{
	static const char *const sets[] = {
	    "bounding", "effective", "inheritable", "permitted", "ambient"};
	struct cnl_oci_spec s = spec();
	json_t *doc = config(&s), *proc = json_object_get(doc, "process");
	json_t *caps = json_object_get(proc, "capabilities");

	for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
		json_t *set = json_object_get(caps, sets[i]);
		assert_true(json_is_array(set));
		assert_int_equal(json_array_size(set), 0);
	}
	assert_true(json_is_true(json_object_get(proc, "noNewPrivileges")));
	assert_true(json_is_true(
	    json_object_get(json_object_get(doc, "root"), "readonly")));
	json_decref(doc);
}

/* The seccomp filter refuses each call that would widen the tenant's
 * reach, and clone with a namespace flag. */
static void test_seccomp(void **state)
{
	static const char *const must[] = {"mount",
	                                   "unshare",
	                                   "setns",
	                                   "keyctl",
	                                   "bpf",
	                                   "ptrace_x",
	                                   "perf_event_open",
	                                   "init_module",
	                                   "kexec_load",
	                                   "open_by_handle_at",
	                                   "pivot_root",
	                                   "userfaultfd",
	                                   "io_uring_setup",
	                                   "io_uring_enter"};
	struct cnl_oci_spec s = spec();
	json_t *doc = config(&s);
	json_t *sc = json_object_get(json_object_get(doc, "linux"), "seccomp");
	json_t *calls = json_object_get(sc, "syscalls"), *it, *name;
	size_t i, j;
	int clone_rules = 0;

	assert_string_equal(
	    json_string_value(json_object_get(sc, "defaultAction")),
	    "SCMP_ACT_ALLOW");
	for (size_t k = 0; k < sizeof(must) / sizeof(must[0]); k++) {
		bool found = false;

		json_array_foreach (calls, i, it) {
			json_array_foreach (json_object_get(it, "names"), j,
			                    name) {
				if (strcmp(json_string_value(name), must[k]) ==
				    0)
					found = strcmp(json_string_value(
					                   json_object_get(
					                       it, "action")),
					               "SCMP_ACT_ERRNO") == 0;
			}
		}
		/* ptrace stays allowed (debuggers inside the container):
		 * the sentinel proves the search can fail. */
		if (strcmp(must[k], "ptrace_x") == 0)
			assert_false(found);
		else if (!found)
			fail_msg("%s is not refused", must[k]);
	}
	json_array_foreach (calls, i, it) {
		json_t *args = json_object_get(it, "args");
		if (strcmp(json_string_value(
		               json_array_get(json_object_get(it, "names"), 0)),
		           "clone") == 0 &&
		    json_array_size(args) == 1)
			clone_rules++;
	}
	assert_int_equal(clone_rules, 7);
	json_decref(doc);
}

static void test_namespaces_and_network(void **state)
{
	static const char *const all[] = {"pid",   "ipc",  "uts",
	                                  "mount", "user", "cgroup"};
	struct cnl_oci_spec s = spec();
	json_t *doc = config(&s);

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		assert_true(has_ns(doc, all[i]));
	assert_true(has_ns(doc, "network"));
	/* Its own network: a sysfs of its own. */
	assert_string_equal(
	    json_string_value(json_object_get(mount_at(doc, "/sys"), "type")),
	    "sysfs");
	json_decref(doc);
	s.host_network = true;
	doc = config(&s);
	assert_false(has_ns(doc, "network"));
	assert_true(has_option(mount_at(doc, "/sys"), "ro"));
	json_decref(doc);
}

static void test_env_and_mounts(void **state)
{
	struct cnl_oci_spec s = spec();
	json_t *doc = config(&s), *proc = json_object_get(doc, "process");
	json_t *env = json_object_get(proc, "env"), *ws, *shim;

	/* Exactly the caller's environment, nothing of the agent's. */
	assert_int_equal(json_array_size(env), 2);
	assert_string_equal(json_string_value(json_array_get(env, 0)),
	                    "PATH=/usr/bin:/bin");
	assert_string_equal(json_string_value(json_array_get(env, 1)),
	                    "HOME=/workspace");
	assert_string_equal(
	    json_string_value(json_array_get(json_object_get(proc, "args"), 2)),
	    "echo hi");
	ws = mount_at(doc, "/workspace");
	assert_non_null(ws);
	assert_string_equal(json_string_value(json_object_get(ws, "source")),
	                    "/srv/w/jobs/j1");
	assert_false(has_option(ws, "ro"));
	assert_true(has_option(ws, "nosuid"));
	shim = mount_at(doc, "/opt/cnlab/libcnlab-cuda.so");
	assert_true(has_option(shim, "ro"));
	assert_non_null(mount_at(doc, "/proc"));
	assert_true(has_option(mount_at(doc, "/tmp"), "nosuid"));
	json_decref(doc);
}

static void test_devices(void **state)
{
	static const char *const devs[] = {"/dev/null", NULL};
	static const char *const not_dev[] = {"/etc/hostname", NULL};
	struct cnl_oci_spec s = spec();
	json_t *doc, *d;
	char err[200] = "";

	s.devices = devs;
	doc = config(&s);
	d = json_array_get(
	    json_object_get(json_object_get(doc, "linux"), "devices"), 0);
	assert_string_equal(json_string_value(json_object_get(d, "type")), "c");
	assert_int_equal(json_integer_value(json_object_get(d, "major")), 1);
	assert_int_equal(json_integer_value(json_object_get(d, "minor")), 3);
	json_decref(doc);
	s.devices = not_dev;
	doc = NULL;
	assert_int_equal(cnl_oci_config(&s, &doc, err, sizeof(err)), -EINVAL);
	assert_null(doc);
	assert_non_null(strstr(err, "/etc/hostname"));
}

static void test_refusals(void **state)
{
	static const struct cnl_oci_mount rel[] = {
	    {"workspace", "/x", "bind", false, NULL}};
	struct cnl_oci_spec s;
	json_t *doc = NULL;
	char err[200];

	s = spec();
	s.host_id_base = 0; /* would map the container's root to root */
	assert_int_equal(cnl_oci_config(&s, &doc, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "never host root"));
	s = spec();
	s.host_id_base = 0xffffffffu - 10;
	assert_int_equal(cnl_oci_config(&s, &doc, err, sizeof(err)), -EINVAL);
	s = spec();
	s.cwd = "workspace";
	assert_int_equal(cnl_oci_config(&s, &doc, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "absolute"));
	s = spec();
	s.mounts = rel;
	s.n_mounts = 1;
	assert_int_equal(cnl_oci_config(&s, &doc, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "mount 0"));
	s = spec();
	s.argv = NULL;
	assert_int_equal(cnl_oci_config(&s, &doc, err, sizeof(err)), -EINVAL);
	assert_null(doc);
}

static void test_write_0600(void **state)
{
	char dir[] = "/tmp/cnl-oci-XXXXXX", path[64], err[200];
	struct cnl_oci_spec s = spec();
	struct stat st;
	json_t *doc;

	assert_non_null(mkdtemp(dir));
	umask(0);
	assert_int_equal(cnl_oci_write(dir, &s, err, sizeof(err)), 0);
	umask(022);
	snprintf(path, sizeof(path), "%s/config.json", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	doc = json_load_file(path, 0, NULL);
	assert_non_null(doc);
	assert_string_equal(
	    json_string_value(json_object_get(doc, "ociVersion")), "1.0.2");
	json_decref(doc);
	unlink(path);
	rmdir(dir);
}

/* The container's process: plain words run by cnlab-init itself, with
 * no shell between; whatever the shell would change (quotes, expansions,
 * redirections, operators, globs, a comment, an assignment, a builtin)
 * still goes to "/bin/sh -c", unchanged. */
static void test_plain_argv(void **state)
{
	static const char *const shell[] = {
	    "echo $HOME", "echo 'a b'",  "echo \"a\"",  "ls *.py", "a && b",
	    "a; b",       "a | b",       "a > f",       "a < f",   "a &",
	    "echo ~",     "echo `id`",   "x=1 python3", "cd /tmp", "exit 3",
	    "exec true",  "a # comment", "echo a\\ b",  "a\tb",    "a\nb",
	    "ls [ab]",    "echo {a,b}",  "(true)",      "! true",  ". ./env",
	    "",           "   ",         "ulimit -n 1",
	};
	const char *w[8];
	char buf[128];

	(void)state;
	assert_int_equal(cnl_agent_plain_argv("true", buf, sizeof(buf), w, 8),
	                 1);
	assert_string_equal(w[0], "true");
	assert_int_equal(cnl_agent_plain_argv("  python3 train.py --lr=0.1  "
	                                      "-o out/a,b:c+d@e%f",
	                                      buf, sizeof(buf), w, 8),
	                 5);
	assert_string_equal(w[0], "python3");
	assert_string_equal(w[1], "train.py");
	assert_string_equal(w[2], "--lr=0.1");
	assert_string_equal(w[3], "-o");
	assert_string_equal(w[4], "out/a,b:c+d@e%f");
	for (size_t i = 0; i < sizeof(shell) / sizeof(shell[0]); i++) {
		if (cnl_agent_plain_argv(shell[i], buf, sizeof(buf), w, 8) != 0)
			fail_msg("\"%s\" went without the shell", shell[i]);
	}
	/* More words than room, or longer than the buffer: the shell. */
	assert_int_equal(
	    cnl_agent_plain_argv("a b c d e f g h i", buf, sizeof(buf), w, 8),
	    0);
	assert_int_equal(cnl_agent_plain_argv("abcdef", buf, 6, w, 8), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_ids_never_host_root),
	    cmocka_unit_test(test_no_privileges),
	    cmocka_unit_test(test_seccomp),
	    cmocka_unit_test(test_namespaces_and_network),
	    cmocka_unit_test(test_env_and_mounts),
	    cmocka_unit_test(test_devices),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_write_0600),
	    cmocka_unit_test(test_plain_argv),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
