# Sourced by ci/verbs.sh and ci/verbs_run.sh: the soft-RoCE guest (../shared/rxe-vm/, see its
# NOTES.md) or a printed reason to skip. Set NAME (the script's name) and WHAT (what is
# skipped) before sourcing. Defines RXE and skip(); builds the guest image (cached).
# Without qemu or the image it skips (exit 0); under CI=true a missing guest is a failure.
RXE=../shared/rxe-vm
skip() {
    echo "$NAME: SKIPPED $WHAT in the soft-RoCE guest: $*"
    if [ "${CI:-}" = "true" ]; then
        echo "$NAME: CI=true: the guest and its inputs are required" >&2
        exit 1
    fi
    exit 0
}
[ -x "$RXE/run-in-vm.sh" ] && [ -x "$RXE/build-image.sh" ] || skip "$RXE/run-in-vm.sh not found"
img_log=$(mktemp)
if ! "$RXE/build-image.sh" >"$img_log" 2>&1; then
    tail -n 5 "$img_log"
    rm -f "$img_log"
    skip "$RXE/build-image.sh could not build the guest image (qemu/kernel packages unavailable?)"
fi
rm -f "$img_log"
