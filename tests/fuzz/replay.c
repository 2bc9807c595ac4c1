/*
 * replay.c - a plain main() for a fuzz target, so the default (gcc) and
 * ASan builds replay its inputs as an ordinary test: each argument is a
 * file, or a folder whose files (sorted by name, dot-files skipped) are
 * fed one by one to LLVMFuzzerTestOneInput(), the same entry point
 * libFuzzer calls.  A crash, an abort or a sanitizer report fails the
 * test; the name of each input is printed before it runs, so the failing
 * one is the last line.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f) {
		perror(path);
		return -1;
	}
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 4096;
			if (!(buf = realloc(buf, cap)))
				abort();
		}
		size_t r = fread(buf + n, 1, cap - n, f);

		if (r == 0)
			break;
		n += r;
	}
	fclose(f);
	printf("%s (%zu bytes)\n", path, n);
	fflush(stdout);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
	int files = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		struct dirent **names;
		int k;

		if (stat(argv[i], &st) < 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) < 0)
				return 1;
			files++;
			continue;
		}
		if ((k = scandir(argv[i], &names, NULL, by_name)) < 0) {
			perror(argv[i]);
			return 1;
		}
		for (int j = 0; j < k; j++) {
			char path[4096];

			if (names[j]->d_name[0] != '.') {
				snprintf(path, sizeof(path), "%s/%s", argv[i],
				         names[j]->d_name);
				if (stat(path, &st) == 0 &&
				    S_ISREG(st.st_mode)) {
					if (run_file(path) < 0)
						return 1;
					files++;
				}
			}
			free(names[j]);
		}
		free(names);
	}
	printf("replayed %d inputs\n", files);
	return 0;
}
