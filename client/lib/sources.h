/* The registry of the loader's data sources (source.h): the implementations this build has and
 * which one serves an address. A new source adds its declaration and its address test here. */
#ifndef DSC_SOURCES_H
#define DSC_SOURCES_H

#include "source.h"

extern const dsc_source_ops_t dsc__source_tcp;   /* source_tcp.c */
extern const dsc_source_ops_t dsc__source_files; /* source_files.c: the fallback path */

/* The source that serves a member address: TCP for every address today (a source with addresses
 * of its own, such as "rdma://host:port", adds its test here). The fallback files use
 * dsc__source_files. */
static inline const dsc_source_ops_t *dsc__source_for_addr(const char *addr) {
    (void)addr;
    return &dsc__source_tcp;
}

#endif
