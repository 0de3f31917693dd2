/* The forms of `dscache ingest` for formats other than dscache's own (ingest_wds.c,
 * ingest_megatron.c, ingest_mds.c, ingest_images.c): dispatched by dsc_cmd_ingest (cmd_ingest.c)
 * with argv[0] the form's name. Each returns a DSC_CLI_* exit code. */
#ifndef DSC_CLI_INGEST_FORMS_H
#define DSC_CLI_INGEST_FORMS_H

int dsc_cmd_ingest_webdataset(int argc, char **argv);
int dsc_cmd_ingest_megatron(int argc, char **argv);
int dsc_cmd_ingest_mds(int argc, char **argv);
int dsc_ingest_images(int argc, char **argv); /* an ImageFolder tree */

#endif
