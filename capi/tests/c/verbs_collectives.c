/* Issue 35's collectives from C over verbs (a `verbs` build; run in the soft-RoCE guest by
 * ci/verbs.sh through ci/verbs_guest_capi.sh, one process per rank started as a launcher
 * would: BALLAST_ROOT, BALLAST_RANK/SIZE, BALLAST_IB_DEVICE, BALLAST_GID_INDEX): the checks
 * of collectives_body.h on the communicator of ballast_comm_from_env with transport
 * `verbs` (the engine's algorithms over verbs), after checking its notes, then a call on
 * the freed communicator. With `--no-1mib-reductions` the 1 MiB reductions are left out
 * (minutes under TCG with more processes than the guest's vCPUs). Prints "capi verbs collectives: rank R of N: P passed, F failed"
 * on every process and exits non-zero if a check failed. Build:
 *   cc verbs_collectives.c -I capi/include -L DIR -lballast   (libballast built with verbs) */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ballast.h"
#include "check.h"

#include "collectives_body.h"

int main(int argc, char **argv) {
    skip_large = argc > 1 && strcmp(argv[1], "--no-1mib-reductions") == 0;
    ballast_config *cfg = NULL;
    OK(ballast_config_new(&cfg)); /* the defaults and the BALLAST_* environment */
    OK(ballast_config_set(cfg, "transport", "verbs"));
    OK(ballast_config_set(cfg, "buffer_size", "16K"));
    OK(ballast_config_set(cfg, "lock_pool", "false"));
    ballast_comm *comm = NULL;
    OK(ballast_comm_from_env(cfg, &comm));
    if (comm == NULL) {
        printf("capi verbs collectives: no communicator: %d passed, %d failed\n", atomic_load(&passed),
               atomic_load(&failed));
        return 1;
    }
    int me = -1, n = -1;
    OK(ballast_rank(comm, &me));
    OK(ballast_world_size(comm, &n));
    check_rank = me;
    char notes[2048];
    size_t full = 0;
    OK(ballast_comm_notes(comm, notes, sizeof notes, &full));
    CHECK(strstr(notes, "transport: verbs\n") != NULL);
    CHECK(strstr(notes, "path: engine\n") != NULL);
    collectives_suite(comm, 5);
    OK(ballast_comm_free(comm));

    /* A freed communicator is refused. */
    double d = 1;
    EXPECT_ERR(ballast_allreduce(comm, &d, &d, 1, BALLAST_DOUBLE, BALLAST_SUM), BALLAST_EINVAL,
               "not a live communicator");
    EXPECT_ERR(ballast_bcast(comm, 0, &d, 8), BALLAST_EINVAL, "not a live communicator");

    OK(ballast_config_free(cfg));
    int p = atomic_load(&passed), f = atomic_load(&failed);
    printf("capi verbs collectives: rank %d of %d: %d passed, %d failed\n", me, n, p, f);
    return f == 0 ? 0 : 1;
}
