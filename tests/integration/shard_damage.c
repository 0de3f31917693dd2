/* Test helper: damages every chunk of one shard of a dataset directory in place.
 * usage: shard_damage flip DIR SHARD     one byte flipped in each chunk's stored bytes, checksums
 *                                        left alone (a server answers CORRUPT; a reader of the
 *                                        file gets DSC_ECHUNKSUM)
 *        shard_damage silent DIR SHARD   the last byte of each lz4 chunk (always a literal, so
 *                                        the block still decodes to raw_len bytes, one of them
 *                                        wrong) flipped, and the stored checksum, the index
 *                                        checksum and the manifest's file checksum rewritten to
 *                                        match: a server validates and serves it; the reader's
 *                                        decoded-bytes check fails (DSC_EDATASUM)
 *        shard_damage chunk DIR SHARD C   one byte flipped in chunk C's stored bytes only (the
 *                                        header, index and footer stay valid: a server answers
 *                                        CORRUPT for chunk C and serves the others)
 * Prints the number of chunks damaged. */
#include "manifest.h"
#include "manifest_io.h"
#include "shard.h"
#include "testdata.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int one = argc == 5 && strcmp(argv[1], "chunk") == 0;
    if (!one && (argc != 4 || (strcmp(argv[1], "flip") != 0 && strcmp(argv[1], "silent") != 0))) {
        fprintf(stderr, "usage: shard_damage flip|silent DIR SHARD | chunk DIR SHARD CHUNK\n");
        return 2;
    }
    int silent = strcmp(argv[1], "silent") == 0;
    uint32_t only = one ? (uint32_t)strtoul(argv[4], NULL, 10) : 0;
    const char *dir = argv[2];
    uint32_t shard = (uint32_t)strtoul(argv[3], NULL, 10);
    dsc_manifest_t *m = NULL;
    int rc = dsc_manifest_load(dir, &m);
    if (rc < 0 || shard >= m->shard_count) {
        fprintf(stderr, "shard_damage: %s: %s\n", dir, rc < 0 ? dsc_strerror(rc) : "no such shard");
        dsc_manifest_free(m);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, m->shards[shard].file);
    uint64_t len = 0;
    uint8_t *buf = testdata_read_file(path, &len);
    dsc_shard_view_t view;
    if (buf == NULL || (rc = dsc_shard_parse(buf, len, &view)) < 0) {
        fprintf(stderr, "shard_damage: %s: %s\n", path, buf ? dsc_strerror(rc) : "unreadable");
        free(buf);
        dsc_manifest_free(m);
        return 1;
    }
    uint8_t *index = buf + view.footer.index_offset;
    uint32_t damaged = 0;
    for (uint32_t c = 0; c < view.footer.chunk_count; c++) {
        dsc_chunk_entry_t e;
        dsc_shard_chunk(&view, c, &e);
        uint8_t *stored = buf + e.offset;
        if (one && c != only)
            continue;
        if (!silent) {
            stored[e.stored_len / 2] ^= 0x40;
            damaged++;
            continue;
        }
        if (e.codec != DSC_CODEC_LZ4)
            continue;
        stored[e.stored_len - 1] ^= 0x40;
        e.stored_checksum = dsc_checksum(stored, e.stored_len);
        dsc_chunk_entry_encode(&e, index + (size_t)c * DSC_CHUNK_ENTRY_SIZE);
        /* Check that the damage is the intended kind. */
        uint8_t *raw = malloc(e.raw_len);
        rc = raw ? dsc_chunk_decode(&e, stored, raw, e.raw_len) : DSC_ENOMEM;
        free(raw);
        if (rc != DSC_EDATASUM) {
            fprintf(stderr, "shard_damage: chunk %u decodes to %s, not DSC_EDATASUM\n", c,
                    dsc_err_name(rc));
            return 1;
        }
        damaged++;
    }
    if (silent) {
        view.footer.index_checksum =
            dsc_checksum(index, (size_t)view.footer.chunk_count * DSC_CHUNK_ENTRY_SIZE);
        dsc_shard_footer_encode(&view.footer, buf + len - DSC_SHARD_FOOTER_SIZE);
        m->shards[shard].checksum = dsc_checksum(buf, len);
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "shard_damage: cannot write %s\n", path);
        return 1;
    }
    if (silent && (rc = dsc_manifest_save(dir, m)) < 0) {
        fprintf(stderr, "shard_damage: %s: manifest: %s\n", dir, dsc_strerror(rc));
        return 1;
    }
    printf("%u\n", damaged);
    free(buf);
    dsc_manifest_free(m);
    return damaged > 0 ? 0 : 1;
}
