/* The dataset manifest's file (DIR/manifest.json, proto/FORMAT.md): read without blocking and
 * parsed (proto/manifest.h), or serialized, checked and written atomically (temp file, fsync,
 * rename). The file I/O of the manifest codec, which itself works on memory only. */
#ifndef DSC_SYS_MANIFEST_IO_H
#define DSC_SYS_MANIFEST_IO_H

#include "manifest.h"

#include <stdint.h>

/* Reads and parses DIR/manifest.json: as dsc_manifest_parse, plus DSC_ENOENT, DSC_EACCES,
 * DSC_EIO (not a regular file, a read error), another -errno from open. Never blocks on a FIFO
 * or a device (opened O_NONBLOCK, fstat before reading); the size is checked before reading. */
int dsc_manifest_load(const char *dir, dsc_manifest_t **out);

/* The identity of a manifest file as it was opened (fstat): what tells a rescan that it did not
 * change since it was read. */
typedef struct dsc_manifest_file_id {
    uint64_t dev, ino, size, mtime_ns;
} dsc_manifest_file_id_t;
#define DSC_MANIFEST_NOFOLLOW 1u /* refuse DIR/manifest.json when it is a symbolic link */
/* dsc_manifest_load with flags (DSC_MANIFEST_NOFOLLOW: a symbolic link is DSC_EIO); *id (may be
 * NULL) gets the file's identity once it is open and regular; *why (may be NULL) a few words for
 * a log line on failure ("not a regular file", "a symbolic link (not followed)", "larger than
 * 64 MiB", "invalid", ...; static). Memory: the file's size, in a mapping unmapped before it
 * returns, plus the parse (dsc_manifest_parse: proportional to the shards and "meta", not to
 * unknown keys). */
int dsc_manifest_load_file(const char *dir, unsigned flags, dsc_manifest_file_id_t *id,
                           const char **why, dsc_manifest_t **out);
/* Writes DIR/manifest.json atomically (temp file + rename). Returns 0 or -errno; DSC_EINVAL
 * (nothing written) for a manifest that dsc_manifest_parse would reject. */
int dsc_manifest_save(const char *dir, const dsc_manifest_t *manifest);

#endif
