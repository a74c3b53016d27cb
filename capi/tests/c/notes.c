/* ballast_comm_notes from C (over the local transport, 2 ranks): the first two lines name
 * the transport and the path, every note ends with a newline, the copy has snprintf
 * semantics (cut at len - 1 bytes plus a NUL, nothing written past len, the full length
 * reported), and the failures (NULL comm, NULL buf with a length). Built with
 * -fsanitize=address,undefined by capi/tests/c_programs.rs. Prints
 * "capi notes: N passed, M failed" and exits non-zero if a check failed. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ballast.h"
#include "check.h"

static int rank_main(ballast_comm *comm, void *user) {
    (void)user;
    size_t full = 0;
    CHECK(ballast_comm_notes(comm, NULL, 0, &full) == 0);
    CHECK(full >= strlen("transport: local\npath: engine\n"));
    char *text = malloc(full + 1);
    if (text == NULL) return 1;
    size_t again = 0;
    CHECK(ballast_comm_notes(comm, text, full + 1, &again) == 0);
    CHECK(again == full);
    CHECK(strlen(text) == full);
    CHECK(strncmp(text, "transport: local\npath: engine\n", 30) == 0);
    CHECK(full > 0 && text[full - 1] == '\n');
    free(text);

    char cut[12];
    memset(cut, 'x', sizeof cut);
    CHECK(ballast_comm_notes(comm, cut, 8, NULL) == 0);
    CHECK(memcmp(cut, "transpo\0xxxx", 12) == 0);
    CHECK(ballast_comm_notes(comm, cut, 1, &again) == 0 && cut[0] == '\0' && again == full);

    char msg[256];
    CHECK(ballast_comm_notes(comm, NULL, 4, &again) == BALLAST_EINVAL);
    ballast_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "ballast_comm_notes: buf is NULL") != NULL);
    CHECK(ballast_comm_notes(NULL, cut, sizeof cut, &again) == BALLAST_EINVAL);
    ballast_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "ballast_comm_notes: comm is NULL") != NULL);
    return 0;
}

int main(void) {
    ballast_config *cfg = NULL;
    if (ballast_config_new(&cfg) != 0) return 2;
    CHECK(ballast_local_run(2, cfg, rank_main, NULL) == 0);
    ballast_config_free(cfg);
    printf("capi notes: %d passed, %d failed\n", atomic_load(&passed), atomic_load(&failed));
    return atomic_load(&failed) == 0 ? 0 : 1;
}
