/* Replays a fuzz target's corpus (every file of a directory) without libFuzzer, so the
 * targets build with any compiler and the corpus runs as a regression test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *dir = opendir(argv[1]);
    if (dir == NULL) {
        printf("SKIP: no corpus directory %s\n", argv[1]);
        return 77;
    }
    int files = 0;
    struct dirent *ent;
    while ((ent = readdir(dir)) != NULL) {
        if (ent->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], ent->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
        size_t got = fread(buf, 1, (size_t)len, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, got);
        free(buf);
        files++;
    }
    closedir(dir);
    printf("replayed %d corpus files from %s\n", files, argv[1]);
    return files > 0 ? 0 : 1;
}
