// ringtest_reference: the ring test's network simulated in one process, with no partition
// and no exchange: every cell steps in gid order and a spike is scheduled on its targets
// at once. Its spike file is what `ringtest` must write on any number of ranks.
//
//   ringtest_reference --rings 4 --cells-per-ring 8 --tstop 100 --out reference.dat
#include <cstdio>
#include <exception>
#include <vector>

#include "model.hpp"

int main(int argc, char **argv) {
    try {
        const ringtest::Params p = ringtest::parse_args(argc, argv, /*distributed=*/false);
        std::vector<ringtest::Cell> cells(static_cast<size_t>(p.ncells()));
        for (int g = 0; g < p.ncells(); ++g) {
            if (ringtest::stimulated(g, p)) cells[g].receive(0, ringtest::kStimSource, ringtest::kStimWeight);
        }
        std::vector<ringtest::Spike> spikes;
        for (int64_t k = 0; k < p.steps; ++k) {
            for (int g = 0; g < p.ncells(); ++g) {
                if (!cells[g].advance(k)) continue;
                spikes.push_back({k + 1, g});
                for (const ringtest::Connection &c : ringtest::connections_from(g, p)) {
                    const int64_t at = k + 1 + c.delay;
                    if (at < p.steps) cells[c.target].receive(at, g, c.weight);
                }
            }
        }
        ringtest::write_spike_file(p.out, spikes);
        std::printf("ringtest_reference: %d rings x %d cells, %lld steps: %zu spikes -> %s\n", p.rings, p.cells,
                    static_cast<long long>(p.steps), spikes.size(), p.out.c_str());
        return 0;
    } catch (const std::invalid_argument &e) {
        std::fprintf(stderr, "ringtest_reference: %s\n", e.what());
        std::fprintf(stderr, "usage: ringtest_reference [--rings N] [--cells-per-ring N] [--tstop MS] --out PATH\n"
                             "  (defaults: 4 rings, 8 cells per ring, 100 ms)\n");
        return 2;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "ringtest_reference: %s\n", e.what());
        return 1;
    }
}
