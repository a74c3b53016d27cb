// The ring network of the ring test and its cell model, shared by `ringtest` (the network
// partitioned over Ballast ranks) and `ringtest_reference` (the whole network in one
// process, no exchange). What is here is the model only: parameters and their parsing,
// the connectivity, the cell's integration step, and the spike file format. The partition
// and the exchange live in ringtest.cpp alone.
//
// The network (after NEURON's ringtest, neuronsimulator/ringtest): `rings` rings of
// `cells` cells; gid = ring * cells + cell. Cell i of ring r excites cell i + 1 of the same
// ring (delay 1 ms, a weight that makes it fire) and, weakly, cell (3 i + 1) mod cells of
// ring r + 1 (delay 1.5 ms, sub-threshold: it only advances the next spike). One cell of
// every ring is stimulated once at t = 0, so a wave runs around every ring until tstop.
//
// Time is an integer step count (dt = 0.025 ms, 40 steps per ms), delays are whole steps
// and a cell sums the inputs of a step sorted by (source gid, weight), so the double
// arithmetic is the same in every partition and the spike times are reproducible bit for
// bit whatever the number of ranks.
#ifndef BALLAST_RINGTEST_MODEL_HPP
#define BALLAST_RINGTEST_MODEL_HPP

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace ringtest {

constexpr int kStepsPerMs = 40;     // dt = 0.025 ms
constexpr int kMicrosPerStep = 25;  // for printing times exactly
constexpr int kRingDelay = 40;      // steps (1 ms)
constexpr int kCrossDelay = 60;     // steps (1.5 ms)
constexpr double kRingWeight = 140.0;
constexpr double kCrossWeight = 30.0;
constexpr double kStimWeight = 140.0;
constexpr int kStimSource = -1;  // the source id of the stimulus at step 0

// Leaky integrate-and-fire with an exponentially decaying synaptic drive (mV):
// v += (v_rest - v + i) * dt / tau_m, i -= i * dt / tau_syn, a spike when v >= v_thresh,
// then v = v_reset and a refractory period.
constexpr double kVRest = -65.0;
constexpr double kVThresh = -50.0;
constexpr double kVReset = -70.0;
constexpr double kDtOverTauM = 0.0025;   // dt / 10 ms
constexpr double kDtOverTauS = 0.0125;   // dt / 2 ms
constexpr int kRefractorySteps = 40;     // 1 ms

// Limits of the command line: the work (cells x steps) bounds the run time and the spikes
// held (a cell fires at most once per refractory period).
constexpr long kMaxCells = 1000000;
constexpr double kMaxTstopMs = 100000.0;
constexpr double kMaxCellSteps = 1e9;
constexpr long kMaxRanks = 256;

struct Params {
    int rings = 4;
    int cells = 8;      // per ring
    double tstop_ms = 100.0;
    int64_t steps = 0;  // tstop_ms * kStepsPerMs
    std::string out;
    int ranks = 1;      // ringtest only: ranks of ballast_local_run
    bool ranks_given = false;
    bool mpi = false;   // ringtest only: one rank per MPI process
    int ncells() const { return rings * cells; }
};

struct Connection {
    int target;
    int delay;  // steps
    double weight;
};

// The outgoing connections of `gid`, in a fixed order (the ring one, then the cross one).
inline std::vector<Connection> connections_from(int gid, const Params &p) {
    const int ring = gid / p.cells, cell = gid % p.cells;
    return {
        {ring * p.cells + (cell + 1) % p.cells, kRingDelay, kRingWeight},
        {((ring + 1) % p.rings) * p.cells + (3 * cell + 1) % p.cells, kCrossDelay, kCrossWeight},
    };
}

// The stimulus: cell (2 r) mod cells of ring r, once at step 0 (NEURON's ringtest stimulates
// cell 0 of every ring; shifting it per ring puts the waves out of phase, so the cross
// connections meet different states in different rings).
inline bool stimulated(int gid, const Params &p) { return gid % p.cells == (2 * (gid / p.cells)) % p.cells; }

// One cell: its state and the inputs scheduled for the steps it has not integrated yet.
class Cell {
  public:
    // Schedules `weight` from `source` for step `step`; throws if the cell already
    // integrated that step (an input that came too late).
    void receive(int64_t step, int source, double weight) {
        if (step < next_step_) {
            throw std::logic_error("input from gid " + std::to_string(source) + " for step " +
                                   std::to_string(step) + " arrived after the cell integrated step " +
                                   std::to_string(next_step_ - 1));
        }
        pending_[step].emplace_back(source, weight);
    }

    // Integrates step `step` (from t = step * dt to (step + 1) * dt); steps must come in
    // order. Returns true when the cell fires (its spike is at step + 1).
    bool advance(int64_t step) {
        if (step != next_step_) throw std::logic_error("cell stepped out of order");
        next_step_ = step + 1;
        auto it = pending_.begin();
        if (it != pending_.end() && it->first == step) {
            std::vector<std::pair<int, double>> &in = it->second;
            std::sort(in.begin(), in.end());
            for (const auto &sw : in) i_ += sw.second;
            pending_.erase(it);
        }
        bool fired = false;
        if (refractory_ > 0) {
            --refractory_;
            v_ = kVReset;
        } else {
            v_ += (kVRest - v_ + i_) * kDtOverTauM;
            if (v_ >= kVThresh) {
                fired = true;
                v_ = kVReset;
                refractory_ = kRefractorySteps;
            }
        }
        i_ -= i_ * kDtOverTauS;
        return fired;
    }

  private:
    double v_ = kVRest;
    double i_ = 0.0;
    int refractory_ = 0;
    int64_t next_step_ = 0;
    std::map<int64_t, std::vector<std::pair<int, double>>> pending_;
};

struct Spike {
    int64_t step;  // the spike is at step * dt
    int gid;
    bool operator<(const Spike &o) const { return step != o.step ? step < o.step : gid < o.gid; }
};

// ---- the command line ----

inline long parse_long(const char *opt, const char *text, long lo, long hi) {
    errno = 0;
    char *end = nullptr;
    long v = std::strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        throw std::invalid_argument(std::string(opt) + ": '" + text + "' is not an integer from " +
                                    std::to_string(lo) + " to " + std::to_string(hi));
    }
    return v;
}

// Parses the options both programs share (--rings, --cells-per-ring, --tstop, --out) and,
// when `distributed`, --ranks and --mpi. Throws std::invalid_argument naming the option.
inline Params parse_args(int argc, char **argv, bool distributed) {
    Params p;
    for (int a = 1; a < argc; ++a) {
        const std::string opt = argv[a];
        if (distributed && opt == "--mpi") {
            p.mpi = true;
            continue;
        }
        const bool known = opt == "--rings" || opt == "--cells-per-ring" || opt == "--tstop" ||
                           opt == "--out" || (distributed && opt == "--ranks");
        if (!known) throw std::invalid_argument("unknown option '" + opt + "'");
        if (a + 1 >= argc) throw std::invalid_argument(opt + ": missing value");
        const char *val = argv[++a];
        if (opt == "--rings") {
            p.rings = static_cast<int>(parse_long("--rings", val, 1, kMaxCells));
        } else if (opt == "--cells-per-ring") {
            p.cells = static_cast<int>(parse_long("--cells-per-ring", val, 1, kMaxCells));
        } else if (opt == "--ranks") {
            p.ranks = static_cast<int>(parse_long("--ranks", val, 1, kMaxRanks));
            p.ranks_given = true;
        } else if (opt == "--out") {
            p.out = val;
            if (p.out.empty()) throw std::invalid_argument("--out: empty path");
        } else {
            errno = 0;
            char *end = nullptr;
            double t = std::strtod(val, &end);
            if (errno != 0 || end == val || *end != '\0' || !(t > 0.0) || t > kMaxTstopMs) {
                throw std::invalid_argument(std::string("--tstop: '") + val +
                                            "' is not a time in ms greater than 0 and at most " +
                                            std::to_string(static_cast<long>(kMaxTstopMs)));
            }
            p.tstop_ms = t;
        }
    }
    if (p.out.empty()) throw std::invalid_argument("--out PATH is required");
    if (static_cast<long>(p.rings) * p.cells > kMaxCells) {
        throw std::invalid_argument("--rings x --cells-per-ring: " +
                                    std::to_string(static_cast<long>(p.rings) * p.cells) +
                                    " cells, more than " + std::to_string(kMaxCells));
    }
    p.steps = static_cast<int64_t>(std::llround(p.tstop_ms * kStepsPerMs));
    if (p.steps < 1) throw std::invalid_argument("--tstop: shorter than one step (0.025 ms)");
    if (static_cast<double>(p.steps) * p.ncells() > kMaxCellSteps) {
        throw std::invalid_argument("--tstop x cells: more than 1e9 cell steps");
    }
    return p;
}

// ---- the spike file ----

// "<time in ms, 3 decimals>\t<gid>\n" per spike, sorted by time then gid.
inline std::string format_spikes(std::vector<Spike> spikes) {
    std::sort(spikes.begin(), spikes.end());
    std::string text;
    text.reserve(spikes.size() * 16);
    char line[64];
    for (const Spike &s : spikes) {
        const long long us = static_cast<long long>(s.step) * kMicrosPerStep;
        int n = std::snprintf(line, sizeof line, "%lld.%03lld\t%d\n", us / 1000, us % 1000, s.gid);
        text.append(line, static_cast<size_t>(n));
    }
    return text;
}

namespace detail {
// The temporary file being written, removed if the process is interrupted meanwhile.
inline char tmp_path[4096];
inline void remove_tmp_and_exit(int sig) {
    unlink(tmp_path);
    _exit(128 + sig);
}
}  // namespace detail

// Writes `spikes` (any order) to `path` through a temporary file in the same directory,
// renamed over `path` at the end; on SIGINT/SIGTERM meanwhile the temporary is removed.
// Throws std::runtime_error naming the file.
inline void write_spike_file(const std::string &path, const std::vector<Spike> &spikes) {
    const std::string text = format_spikes(spikes);
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    if (tmp.size() >= sizeof detail::tmp_path) throw std::runtime_error(path + ": path too long");
    std::memcpy(detail::tmp_path, tmp.c_str(), tmp.size() + 1);
    auto old_int = std::signal(SIGINT, detail::remove_tmp_and_exit);
    auto old_term = std::signal(SIGTERM, detail::remove_tmp_and_exit);
    std::string err;
    FILE *f = std::fopen(tmp.c_str(), "wx");
    if (f == nullptr) {
        err = tmp + ": " + std::strerror(errno);
    } else {
        bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
        int saved = errno;
        ok = (std::fclose(f) == 0) && ok;
        if (!ok) {
            err = tmp + ": write failed: " + std::strerror(saved ? saved : errno);
        } else if (std::rename(tmp.c_str(), path.c_str()) != 0) {
            err = path + ": rename from " + tmp + ": " + std::strerror(errno);
        }
        if (!err.empty()) std::remove(tmp.c_str());
    }
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    if (!err.empty()) throw std::runtime_error(err);
}

}  // namespace ringtest

#endif  // BALLAST_RINGTEST_MODEL_HPP
