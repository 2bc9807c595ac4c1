/* static_true.c - a static program that does nothing: the floor of what
 * starting a static executable costs (bench/cli_start.sh). */
int main(void)
{
	return 0;
}
