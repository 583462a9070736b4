/*
 * The command-line conventions of railnet's tools (railnet-diag, railnet-perf, railnet-demo):
 * options parsed with getopt_long, --help on stdout with exit 0, --version as
 * "<tool> <railnetVersion()>" with exit 0, and every usage error as two lines on stderr,
 *
 *   <tool>: <what is wrong>
 *   Try '<tool> --help'.
 *
 * with exit status 2.
 */
#ifndef RAILNET_TOOLS_COMMON_CLI_H_
#define RAILNET_TOOLS_COMMON_CLI_H_

#include <getopt.h>

#define CLI_USAGE_STATUS 2

/* Prints the usage error of tool in the shape above; returns CLI_USAGE_STATUS. */
int cliUsageError(const char* tool, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, then exit(CLI_USAGE_STATUS). */
void cliUsageExit(const char* tool, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Prints "<tool> <railnetVersion()>" on stdout; returns 0. */
int cliVersion(const char* tool);
/* The usage error for what getopt_long returned ('?' or ':') for argv: an unknown option,
 * or an option without its value; returns CLI_USAGE_STATUS. Call with opterr = 0 and an
 * optstring that starts with ':'. */
int cliOptionError(const char* tool, int c, char** argv);
/* The usage error for arguments left after the options (argv[optind] on), if any:
 * returns CLI_USAGE_STATUS, or -1 when there are none. */
int cliNoOperands(const char* tool, int argc, char** argv);

#endif
