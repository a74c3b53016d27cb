// ringtest: NEURON's ring test on libballast. The ring network of model.hpp is distributed
// over the ranks round robin by gid (gid g on rank g mod nranks); the ranks advance in
// windows of the minimum synaptic delay and exchange the window's spikes point to point,
// only with the ranks that need them; at the end every rank's spikes are gathered and
// rank 0 writes one spike file, the same for every rank count (and the same as
// ringtest_reference's).
//
//   ringtest --ranks 3 --rings 4 --cells-per-ring 8 --tstop 100 --out spikes.dat
//   mpirun -n 4 ringtest --mpi --rings 4 --cells-per-ring 8 --tstop 100 --out spikes.dat
//
// (--mpi only in a build against an MPI libballast, where BALLAST_HAVE_MPI is defined.)
//
// The exchange: a spike of cell g at step s reaches its targets at s + delay, and no delay
// is shorter than D (the min delay), so the spikes of window w (steps wD .. wD + D - 1)
// are needed from window w + 1 on. At the end of window w each rank sends one message,
// tag w, to every rank in its out-peers (the owners of a target of one of its cells, taken
// from the connectivity), holding the spikes whose source has a target on that rank, and
// receives one message from every rank in its in-peers (the owners of a source of one of
// its cells). The message goes even when it is empty: it tells the receiver that the
// window is complete on this rank, so no collective is needed per window. The receives of
// window w are posted at its start and complete while the rank computes (ballast_progress
// between steps).
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef BALLAST_HAVE_MPI
// ballast.h includes <mpi.h>; only MPI's C API is used here, not its deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#endif
#include <ballast.h>

#include "model.hpp"

namespace {

// A failed ballast_* call: its code and ballast_last_error's message.
struct BallastError : std::runtime_error {
    int code;
    BallastError(int c, const std::string &what) : std::runtime_error(what), code(c) {}
};

// Throws BallastError when `rc` is not 0, with the calling thread's last error message.
void check(int rc, const char *call) {
    if (rc == 0) return;
    char msg[1024];
    ballast_last_error(msg, sizeof msg);
    throw BallastError(rc, std::string(call) + ": error " + std::to_string(rc) + ": " + msg);
}

// One spike on the wire: 8 bytes, in the host's byte order (the ranks of a job share it).
struct WireSpike {
    uint32_t gid;
    uint32_t step;
};
static_assert(sizeof(WireSpike) == 8, "WireSpike has no padding");

// The statistics a rank sends to rank 0 ahead of its spikes, for the summary.
struct RankStats {
    uint32_t out_peers, in_peers, peers_needed, peers_connected;
    uint64_t messages_sent, bytes_sent, spikes;
};

// What the ranks share: the parameters (the same on every rank) and, under
// ballast_local_run, whether a rank has failed. A rank whose rank_main returns an error
// does not stop the others (only a panic inside the library does), so a rank waiting for
// its messages would wait for ever: the waits below poll with ballast_test and give up
// when this is set. (Under MPI a failing rank calls MPI_Abort instead.)
struct Job {
    ringtest::Params params;
    std::atomic<bool> failed{false};
};

// Waits for every request (MPI_Testall in a loop: each ballast_test progresses once), the
// statuses in `statuses`; throws on a request's error, or when another rank failed.
void wait_all(std::vector<ballast_request *> &reqs, std::vector<ballast_status> &statuses,
              const std::atomic<bool> &failed, const char *what) {
    std::vector<char> done(reqs.size(), 0);
    size_t left = reqs.size();
    while (left > 0) {
        for (size_t i = 0; i < reqs.size(); ++i) {
            if (done[i]) continue;
            int d = 0;
            check(ballast_test(reqs[i], &d, &statuses[i]), what);
            if (d) {
                done[i] = 1;
                --left;
            }
        }
        if (left > 0 && failed.load(std::memory_order_relaxed)) {
            throw std::runtime_error(std::string(what) + ": stopped waiting: another rank failed");
        }
    }
}

// The cells of one rank, their connections, and its peers.
class Rank {
  public:
    Rank(const ringtest::Params &p, const std::atomic<bool> &failed, int rank, int nranks)
        : p_(p), failed_(failed), rank_(rank), nranks_(nranks) {
        const int n = p.ncells();
        for (int g = rank; g < n; g += nranks) local_gids_.push_back(g);
        cells_.resize(local_gids_.size());
        cell_peers_.resize(local_gids_.size());
        std::set<int> out, in;
        min_delay_ = INT32_MAX;
        // Every rank knows the whole connectivity (it is a formula here; a simulator reads
        // it from its model): the min delay is global without a collective.
        for (int g = 0; g < n; ++g) {
            for (const ringtest::Connection &c : ringtest::connections_from(g, p)) {
                min_delay_ = std::min(min_delay_, c.delay);
                const int src_rank = owner(g), dst_rank = owner(c.target);
                if (dst_rank == rank) {
                    targets_[g].push_back(c);
                    if (src_rank != rank) in.insert(src_rank);
                }
                if (src_rank == rank && dst_rank != rank) {
                    std::vector<int> &peers = cell_peers_[local_index(g)];
                    if (std::find(peers.begin(), peers.end(), dst_rank) == peers.end()) peers.push_back(dst_rank);
                    out.insert(dst_rank);
                }
            }
        }
        out_peers_.assign(out.begin(), out.end());
        in_peers_.assign(in.begin(), in.end());
        std::set<int> all(out);
        all.insert(in.begin(), in.end());
        peers_needed_ = static_cast<uint32_t>(all.size());
        for (size_t i = 0; i < local_gids_.size(); ++i) {
            if (ringtest::stimulated(local_gids_[i], p))
                cells_[i].receive(0, ringtest::kStimSource, ringtest::kStimWeight);
        }
        if (p.steps > UINT32_MAX) throw std::invalid_argument("--tstop: too many steps for the wire format");
    }

    int owner(int gid) const { return gid % nranks_; }
    size_t local_index(int gid) const { return static_cast<size_t>(gid / nranks_); }
    int min_delay() const { return min_delay_; }

    // Runs the simulation to p.steps, exchanging spikes with the peers every window.
    void simulate(ballast_comm *comm) {
        const int64_t d = min_delay_;
        const int64_t windows = (p_.steps + d - 1) / d;
        if (windows - 1 > BALLAST_TAG_MAX) throw std::invalid_argument("--tstop: more windows than tags");
        std::unordered_map<int, std::vector<WireSpike>> outbox;
        for (int r : out_peers_) outbox[r];
        std::vector<ballast_request *> recvs(in_peers_.size(), nullptr), sends(out_peers_.size(), nullptr);
        std::vector<ballast_status> statuses(std::max(recvs.size(), sends.size()));
        for (int64_t w = 0; w < windows; ++w) {
            const uint32_t tag = static_cast<uint32_t>(w);
            for (size_t i = 0; i < in_peers_.size(); ++i) {
                check(ballast_irecv(comm, in_peers_[i], tag, &recvs[i]), "ballast_irecv");
            }
            const int64_t end = std::min((w + 1) * d, p_.steps);
            for (int64_t k = w * d; k < end; ++k) {
                for (size_t i = 0; i < cells_.size(); ++i) {
                    if (!cells_[i].advance(k)) continue;
                    const int gid = local_gids_[i];
                    spikes_.push_back({k + 1, gid});
                    deliver(gid, k + 1);  // to this rank's targets
                    for (int r : cell_peers_[i]) {
                        outbox[r].push_back({static_cast<uint32_t>(gid), static_cast<uint32_t>(k + 1)});
                    }
                }
                check(ballast_progress(comm), "ballast_progress");
            }
            // One message per out-peer, empty or not; ballast_isend copies it (the outbox
            // is cleared at once).
            for (size_t i = 0; i < out_peers_.size(); ++i) {
                std::vector<WireSpike> &box = outbox[out_peers_[i]];
                const size_t len = box.size() * sizeof(WireSpike);
                int rc;
                while ((rc = ballast_isend(comm, out_peers_[i], tag, box.data(), len, &sends[i])) == BALLAST_EAGAIN) {
                    check(ballast_progress(comm), "ballast_progress");  // every pool buffer in flight
                    if (failed_.load(std::memory_order_relaxed)) {
                        throw std::runtime_error("ballast_isend: stopped retrying: another rank failed");
                    }
                }
                check(rc, "ballast_isend");
                ++messages_sent_;
                bytes_sent_ += len;
                box.clear();
            }
            wait_all(recvs, statuses, failed_, "ballast_test (receives)");
            for (size_t i = 0; i < recvs.size(); ++i) {
                take(recvs[i], statuses[i], in_peers_[i], w * d, end);
                check(ballast_request_free(recvs[i]), "ballast_request_free");
                recvs[i] = nullptr;
            }
            check(ballast_waitall(sends.size(), sends.data(), statuses.data()), "ballast_waitall (sends)");
            for (ballast_request *&s : sends) {
                check(ballast_request_free(s), "ballast_request_free");
                s = nullptr;
            }
        }
    }

    // Spikes and statistics, to be gathered: a RankStats, then the spikes.
    std::vector<unsigned char> pack(uint32_t peers_connected) const {
        RankStats st{static_cast<uint32_t>(out_peers_.size()), static_cast<uint32_t>(in_peers_.size()), peers_needed_,
                     peers_connected, messages_sent_, bytes_sent_, spikes_.size()};
        std::vector<unsigned char> buf(sizeof st + spikes_.size() * sizeof(WireSpike));
        std::memcpy(buf.data(), &st, sizeof st);
        for (size_t i = 0; i < spikes_.size(); ++i) {
            WireSpike ws{static_cast<uint32_t>(spikes_[i].gid), static_cast<uint32_t>(spikes_[i].step)};
            std::memcpy(buf.data() + sizeof st + i * sizeof ws, &ws, sizeof ws);
        }
        return buf;
    }

    const std::vector<int> &out_peers() const { return out_peers_; }

  private:
    // Schedules the spike of `gid` at `step` on this rank's targets of it.
    void deliver(int gid, int64_t step) {
        auto it = targets_.find(gid);
        if (it == targets_.end()) return;
        for (const ringtest::Connection &c : it->second) {
            const int64_t at = step + c.delay;
            if (at < p_.steps) cells_[local_index(c.target)].receive(at, gid, c.weight);
        }
    }

    // Checks and delivers a received window message from `peer` (spikes at steps
    // lo + 1 .. hi, of cells of `peer` that have a target here).
    void take(ballast_request *req, const ballast_status &st, int peer, int64_t lo, int64_t hi) {
        const void *data = nullptr;
        size_t len = 0;
        check(ballast_request_data(req, &data, &len), "ballast_request_data");
        if (st.source != peer || len != st.len || len % sizeof(WireSpike) != 0) {
            throw std::runtime_error("rank " + std::to_string(rank_) + ": bad window message from rank " +
                                     std::to_string(st.source) + " (expected " + std::to_string(peer) + "), " +
                                     std::to_string(len) + " bytes");
        }
        const unsigned char *bytes = static_cast<const unsigned char *>(data);
        for (size_t off = 0; off < len; off += sizeof(WireSpike)) {
            WireSpike ws;
            std::memcpy(&ws, bytes + off, sizeof ws);
            if (ws.gid >= static_cast<uint32_t>(p_.ncells()) || owner(static_cast<int>(ws.gid)) != peer ||
                ws.step <= lo || ws.step > hi || targets_.count(static_cast<int>(ws.gid)) == 0) {
                throw std::runtime_error("rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                                         " sent a spike of gid " + std::to_string(ws.gid) + " at step " +
                                         std::to_string(ws.step) + " that does not belong to its window");
            }
            deliver(static_cast<int>(ws.gid), ws.step);
        }
    }

    const ringtest::Params &p_;
    const std::atomic<bool> &failed_;
    int rank_, nranks_;
    int min_delay_;
    std::vector<int> local_gids_;
    std::vector<ringtest::Cell> cells_;
    std::vector<std::vector<int>> cell_peers_;  // per local cell: the other ranks it has targets on
    std::unordered_map<int, std::vector<ringtest::Connection>> targets_;  // gid -> connections to this rank
    std::vector<int> out_peers_, in_peers_;
    uint32_t peers_needed_ = 0;
    std::vector<ringtest::Spike> spikes_;
    uint64_t messages_sent_ = 0, bytes_sent_ = 0;
};

// Rank 0: every rank's spikes and statistics from the all-gather, the file, the summary.
void write_output(const ringtest::Params &p, const ballast_gathered *all, int nranks, int min_delay) {
    std::vector<ringtest::Spike> spikes;
    std::vector<RankStats> stats(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r) {
        const void *data = nullptr;
        size_t len = 0;
        check(ballast_gathered_part(all, r, &data, &len), "ballast_gathered_part");
        const unsigned char *bytes = static_cast<const unsigned char *>(data);
        RankStats &st = stats[static_cast<size_t>(r)];
        if (len < sizeof st) throw std::runtime_error("rank " + std::to_string(r) + " gathered a short part");
        std::memcpy(&st, bytes, sizeof st);
        if (st.spikes > (len - sizeof st) / sizeof(WireSpike) || len != sizeof st + st.spikes * sizeof(WireSpike)) {
            throw std::runtime_error("rank " + std::to_string(r) + " gathered " + std::to_string(len) +
                                     " bytes for " + std::to_string(st.spikes) + " spikes");
        }
        for (uint64_t i = 0; i < st.spikes; ++i) {
            WireSpike ws;
            std::memcpy(&ws, bytes + sizeof st + i * sizeof ws, sizeof ws);
            spikes.push_back({static_cast<int64_t>(ws.step), static_cast<int>(ws.gid)});
        }
    }
    ringtest::write_spike_file(p.out, spikes);
    std::printf("ringtest: %d rings x %d cells, %lld steps of 0.025 ms, %d ranks, windows of %d steps: "
                "%zu spikes -> %s\n",
                p.rings, p.cells, static_cast<long long>(p.steps), nranks, min_delay, spikes.size(), p.out.c_str());
    for (int r = 0; r < nranks; ++r) {
        const RankStats &st = stats[static_cast<size_t>(r)];
        std::printf("ringtest: rank %d: %" PRIu64 " spikes, sends to %u ranks, receives from %u, peers needed %u, "
                    "peers connected %u, %" PRIu64 " messages, %" PRIu64 " bytes\n",
                    r, st.spikes, st.out_peers, st.in_peers, st.peers_needed, st.peers_connected, st.messages_sent,
                    st.bytes_sent);
    }
    std::fflush(stdout);
}

// The body of every rank; throws on failure.
void run_rank(ballast_comm *comm, const ringtest::Params &p, const std::atomic<bool> &failed) {
    int rank = -1, nranks = 0;
    check(ballast_rank(comm, &rank), "ballast_rank");
    check(ballast_world_size(comm, &nranks), "ballast_world_size");
    Rank me(p, failed, rank, nranks);
    me.simulate(comm);
    // The peers the runtime connected, before the all-gather opens its own (a rank that
    // finished earlier and started the all-gather may already have connected to this one).
    ballast_footprint fp;
    check(ballast_comm_footprint(comm, &fp), "ballast_comm_footprint");
    const std::vector<unsigned char> mine = me.pack(fp.peers_connected);
    ballast_gathered *all = nullptr;
    check(ballast_allgatherv(comm, mine.data(), mine.size(), &all), "ballast_allgatherv");
    try {
        if (rank == 0) write_output(p, all, nranks, me.min_delay());
    } catch (...) {
        ballast_gathered_free(all);
        throw;
    }
    check(ballast_gathered_free(all), "ballast_gathered_free");
}

// rank_main of ballast_local_run (and the MPI path): no exception crosses into the library.
int rank_main(ballast_comm *comm, void *user) {
    Job *job = static_cast<Job *>(user);
    int rank = -1;
    ballast_rank(comm, &rank);
    try {
        run_rank(comm, job->params, job->failed);
        return 0;
    } catch (const BallastError &e) {
        job->failed.store(true);
        std::fprintf(stderr, "ringtest: rank %d: %s\n", rank, e.what());
        return e.code;
    } catch (const std::exception &e) {
        job->failed.store(true);
        std::fprintf(stderr, "ringtest: rank %d: %s\n", rank, e.what());
        return 1;
    }
}

const char kUsage[] =
    "usage: ringtest [--ranks N | --mpi] [--rings N] [--cells-per-ring N] [--tstop MS] --out PATH\n"
    "  --ranks N           ranks as threads of this process (ballast_local_run; default 1)\n"
    "  --mpi               one rank per MPI process, under mpirun (a build with BALLAST_HAVE_MPI)\n"
    "  --rings N           rings of the network (default 4)\n"
    "  --cells-per-ring N  cells per ring (default 8)\n"
    "  --tstop MS          simulated time in ms, in steps of 0.025 ms (default 100)\n"
    "  --out PATH          the spike file: '<time ms>\\t<gid>' lines sorted by time then gid\n";

#ifdef BALLAST_HAVE_MPI
// One rank per MPI process: this main owns MPI (init and finalize); Ballast duplicates
// MPI_COMM_WORLD and its communicator is freed before MPI_Finalize.
int run_mpi(int argc, char **argv) {
    int provided = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        std::fprintf(stderr, "ringtest: MPI_Init_thread failed\n");
        return 1;
    }
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    Job job;
    try {
        job.params = ringtest::parse_args(argc, argv, /*distributed=*/true);
        if (job.params.ranks_given) throw std::invalid_argument("--ranks: not with --mpi (mpirun -n sets the ranks)");
    } catch (const std::invalid_argument &e) {
        if (world_rank == 0) std::fprintf(stderr, "ringtest: %s\n%s", e.what(), kUsage);
        MPI_Finalize();
        return 2;
    }
    ballast_config *cfg = nullptr;
    ballast_comm *comm = nullptr;
    try {
        check(ballast_config_new(&cfg), "ballast_config_new");
        check(ballast_comm_from_mpi(MPI_COMM_WORLD, cfg, &comm), "ballast_comm_from_mpi");
    } catch (const BallastError &e) {
        std::fprintf(stderr, "ringtest: MPI rank %d: %s\n", world_rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    int rc = rank_main(comm, &job);
    if (rc != 0) MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks would wait for this one
    try {
        check(ballast_comm_free(comm), "ballast_comm_free");
        check(ballast_config_free(cfg), "ballast_config_free");
    } catch (const BallastError &e) {
        std::fprintf(stderr, "ringtest: MPI rank %d: %s\n", world_rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
        return 1;
    }
    MPI_Finalize();
    return 0;
}
#endif

}  // namespace

int main(int argc, char **argv) {
    for (int a = 1; a < argc; ++a) {
        if (std::strcmp(argv[a], "--mpi") == 0) {
#ifdef BALLAST_HAVE_MPI
            return run_mpi(argc, argv);
#else
            std::fprintf(stderr, "ringtest: --mpi: this build has no MPI (libballast without BALLAST_HAVE_MPI)\n");
            return 2;
#endif
        }
        if (std::strcmp(argv[a], "--help") == 0 || std::strcmp(argv[a], "-h") == 0) {
            std::fputs(kUsage, stdout);
            return 0;
        }
    }
    Job job;
    try {
        job.params = ringtest::parse_args(argc, argv, /*distributed=*/true);
    } catch (const std::invalid_argument &e) {
        std::fprintf(stderr, "ringtest: %s\n%s", e.what(), kUsage);
        return 2;
    }
    ballast_config *cfg = nullptr;
    int rc = ballast_config_new(&cfg);
    const char *failed = "ballast_config_new";
    if (rc == 0) {
        rc = ballast_config_set(cfg, "transport", "local");
        failed = "ballast_config_set(transport)";
    }
    if (rc == 0) {
        rc = ballast_local_run(job.params.ranks, cfg, rank_main, &job);
        failed = "ballast_local_run";
    }
    if (rc != 0) {
        char msg[1024];
        ballast_last_error(msg, sizeof msg);
        std::fprintf(stderr, "ringtest: %s: error %d: %s\n", failed, rc, msg);
    }
    if (cfg != nullptr && ballast_config_free(cfg) != 0 && rc == 0) {
        std::fprintf(stderr, "ringtest: ballast_config_free failed\n");
        rc = 1;
    }
    return rc == 0 ? 0 : 1;
}
