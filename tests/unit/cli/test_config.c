/*
 * test_config.c - the CLI settings file: where it lives (CNLAB_CONFIG,
 * XDG_CONFIG_HOME, HOME), a save creates the folders and a 0600 file even
 * under a permissive umask, a load reads it back, a loose mode is
 * tightened, a missing file is empty settings, and malformed or unknown
 * content is an error naming the file.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/config.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/cnl-clicfg-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	FILE *p;

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	p = popen(cmd, "r");
	return p ? pclose(p) : -1;
}

static void test_path(void **state)
{
	char *p;

	(void)state;
	setenv("HOME", "/h", 1);
	unsetenv("XDG_CONFIG_HOME");
	unsetenv("CNLAB_CONFIG");
	p = cnl_cli_config_path();
	assert_string_equal(p, "/h/.config/cnlab/config.json");
	free(p);
	setenv("XDG_CONFIG_HOME", "/x", 1);
	p = cnl_cli_config_path();
	assert_string_equal(p, "/x/cnlab/config.json");
	free(p);
	setenv("CNLAB_CONFIG", "/c.json", 1);
	p = cnl_cli_config_path();
	assert_string_equal(p, "/c.json");
	free(p);
	unsetenv("CNLAB_CONFIG");
	unsetenv("XDG_CONFIG_HOME");
	unsetenv("HOME");
	assert_null(cnl_cli_config_path());
}

static void test_save_load(void **state)
{
	struct cnl_cli_config c = {0}, got;
	char path[128], err[256];
	struct stat st;
	bool warned;
	mode_t old = umask(0);

	(void)state;
	snprintf(path, sizeof(path), "%s/a/b/config.json", dir);
	c.path = strdup(path);
	cnl_cli_config_set(&c.server, "http://h:1");
	cnl_cli_config_set(&c.token, "secret");
	assert_int_equal(cnl_cli_config_save(&c, err, sizeof(err)), 0);
	umask(old);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	snprintf(path, sizeof(path), "%s/a/b", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(
	    cnl_cli_config_load(c.path, &got, &warned, err, sizeof(err)), 0);
	assert_false(warned);
	assert_string_equal(got.server, "http://h:1");
	assert_string_equal(got.token, "secret");
	assert_null(got.project);
	cnl_cli_config_done(&got);
	/* A loose mode is tightened on load. */
	assert_int_equal(chmod(c.path, 0644), 0);
	assert_int_equal(
	    cnl_cli_config_load(c.path, &got, &warned, err, sizeof(err)), 0);
	assert_true(warned);
	assert_int_equal(stat(c.path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	cnl_cli_config_done(&got);
	/* Saving again replaces; clearing the token drops it. */
	cnl_cli_config_set(&c.token, NULL);
	cnl_cli_config_set(&c.project, "ml");
	/* Setting a field to itself (the server a login read from the file)
	 * keeps it: the copy is made before the old string is freed. */
	cnl_cli_config_set(&c.server, c.server);
	assert_string_equal(c.server, "http://h:1");
	assert_int_equal(cnl_cli_config_save(&c, err, sizeof(err)), 0);
	assert_int_equal(
	    cnl_cli_config_load(c.path, &got, &warned, err, sizeof(err)), 0);
	assert_null(got.token);
	assert_string_equal(got.project, "ml");
	cnl_cli_config_done(&got);
	cnl_cli_config_done(&c);
}

/* Credentials per server: each server's own, never another's; an older
 * file's one token is its server's. */
static void test_hosts(void **state)
{
	struct cnl_cli_config c = {0}, got;
	char path[128], err[256];
	bool warned;
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/hosts.json", dir);
	c.path = strdup(path);
	cnl_cli_config_set(&c.server, "https://a.example");
	cnl_cli_config_use_server(&c, "https://a.example");
	cnl_cli_config_set(&c.token, "token-a");
	assert_int_equal(cnl_cli_config_save(&c, err, sizeof(err)), 0);
	/* Another server: no token, then its own. */
	cnl_cli_config_use_server(&c, "https://b.example/");
	assert_null(c.token);
	cnl_cli_config_set(&c.token, "token-b");
	assert_int_equal(cnl_cli_config_save(&c, err, sizeof(err)), 0);
	cnl_cli_config_done(&c);

	assert_int_equal(
	    cnl_cli_config_load(path, &got, &warned, err, sizeof(err)), 0);
	assert_string_equal(got.server, "https://a.example");
	assert_string_equal(got.token, "token-a"); /* the default server's */
	cnl_cli_config_use_server(&got, "https://b.example");
	assert_string_equal(got.token, "token-b");
	cnl_cli_config_use_server(&got, "https://a.example/");
	assert_string_equal(got.token, "token-a");
	cnl_cli_config_use_server(&got, "https://c.example");
	assert_null(got.token);
	/* Logging out of b drops b's entry only. */
	cnl_cli_config_use_server(&got, "https://b.example");
	cnl_cli_config_set(&got.token, NULL);
	assert_int_equal(cnl_cli_config_save(&got, err, sizeof(err)), 0);
	cnl_cli_config_done(&got);
	assert_int_equal(
	    cnl_cli_config_load(path, &got, &warned, err, sizeof(err)), 0);
	cnl_cli_config_use_server(&got, "https://b.example");
	assert_null(got.token);
	cnl_cli_config_use_server(&got, "https://a.example");
	assert_string_equal(got.token, "token-a");
	cnl_cli_config_done(&got);

	/* An older CLI's file: {"server", "token"}. */
	f = fopen(path, "w");
	fputs("{\"server\": \"http://old:8080/\", \"token\": \"t-old\"}", f);
	fclose(f);
	chmod(path, 0600);
	assert_int_equal(
	    cnl_cli_config_load(path, &got, &warned, err, sizeof(err)), 0);
	assert_string_equal(got.token, "t-old");
	cnl_cli_config_use_server(&got, "http://other:8080");
	assert_null(got.token);
	cnl_cli_config_use_server(&got, "http://old:8080");
	assert_string_equal(got.token, "t-old");
	cnl_cli_config_done(&got);

	/* A malformed entry is refused, naming it. */
	f = fopen(path, "w");
	fputs("{\"hosts\": {\"http://x\": {\"token\": 5}}}", f);
	fclose(f);
	assert_true(cnl_cli_config_load(path, &got, &warned, err, sizeof(err)) <
	            0);
	assert_non_null(strstr(err, "http://x"));
	cnl_cli_config_done(&got);
}

static void test_missing_and_bad(void **state)
{
	struct cnl_cli_config got;
	char path[128], err[256];
	bool warned;
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/none.json", dir);
	assert_int_equal(
	    cnl_cli_config_load(path, &got, &warned, err, sizeof(err)), 0);
	assert_null(got.token);
	assert_string_equal(got.path, path);
	cnl_cli_config_done(&got);

	snprintf(path, sizeof(path), "%s/bad.json", dir);
	f = fopen(path, "w");
	fputs("{\"server\": 5}", f);
	fclose(f);
	chmod(path, 0600);
	assert_true(cnl_cli_config_load(path, &got, &warned, err, sizeof(err)) <
	            0);
	assert_non_null(strstr(err, "server"));
	cnl_cli_config_done(&got);

	f = fopen(path, "w");
	fputs("{\"colour\": \"blue\"}", f);
	fclose(f);
	assert_true(cnl_cli_config_load(path, &got, &warned, err, sizeof(err)) <
	            0);
	assert_non_null(strstr(err, "colour"));
	cnl_cli_config_done(&got);

	f = fopen(path, "w");
	fputs("{not json", f);
	fclose(f);
	assert_true(cnl_cli_config_load(path, &got, &warned, err, sizeof(err)) <
	            0);
	assert_non_null(strstr(err, "bad.json"));
	cnl_cli_config_done(&got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_path),
	    cmocka_unit_test(test_save_load),
	    cmocka_unit_test(test_hosts),
	    cmocka_unit_test(test_missing_and_bad),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
