/* The registry of the loader's data sources (source.h): the implementations this build has and
 * which one serves an address. A new source adds its declaration and its address test here. */
#ifndef DSC_SOURCES_H
#define DSC_SOURCES_H

#include "source.h"
#include "source_rdma.h"

extern const dsc_source_ops_t dsc__source_tcp;   /* source_tcp.c */
extern const dsc_source_ops_t dsc__source_files; /* source_files.c: the fallback path */

/* The source that serves a member address: TCP, or with transport auto/rdma the RDMA source
 * (which falls back to TCP per connection under auto). The fallback files use
 * dsc__source_files. */
static inline const dsc_source_ops_t *dsc__source_for_addr(const dsc_source_env_t *env,
                                                           const char *addr) {
    (void)addr;
    return env->transport == DSC_TRANSPORT_TCP ? &dsc__source_tcp : &dsc__source_rdma;
}

#endif
