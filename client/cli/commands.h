/* The dscache commands: one dsc_cmd_<name> per command, each in cmd_<name>.c, listed in the
 * table of main.c (add one line here and one line there). For main.c only. */
#ifndef DSC_CLI_COMMANDS_H
#define DSC_CLI_COMMANDS_H

#include "cli.h"

int dsc_cmd_ingest(int argc, char **argv);
int dsc_cmd_inspect(int argc, char **argv);
int dsc_cmd_get(int argc, char **argv);
int dsc_cmd_stat(int argc, char **argv);
int dsc_cmd_bench(int argc, char **argv);
int dsc_cmd_top(int argc, char **argv);
int dsc_cmd_doctor(int argc, char **argv);
int dsc_cmd_list(int argc, char **argv);
int dsc_cmd_warm(int argc, char **argv);
int dsc_cmd_evict(int argc, char **argv);
int dsc_cmd_pin(int argc, char **argv);      /* cmd_policy.c */
int dsc_cmd_unpin(int argc, char **argv);    /* cmd_policy.c */
int dsc_cmd_limit(int argc, char **argv);    /* cmd_policy.c */
int dsc_cmd_priority(int argc, char **argv); /* cmd_policy.c */

#endif
