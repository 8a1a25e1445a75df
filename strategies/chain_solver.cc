#include "strategies/chain_solver.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ckpt::chain {
namespace {

// The exposed time of copying `bytes` out before a no-graph forward of `forward_ms` and back.
double OffloadMs(const Chain& chain, int64_t bytes, double forward_ms) {
  const double out = static_cast<double>(bytes) * chain.to_host_ms;
  const double hidden = chain.copies_overlap ? std::min(out, forward_ms) : 0.0;
  return out - hidden + static_cast<double>(bytes) * chain.from_host_ms;
}

// What a stored head's backward (option o) hides of a fetch of `bytes` pending on its call (the
// fetch's whole time is charged with its offload).
double FetchHiddenMs(const Chain& chain, int64_t bytes, const Option& o) {
  return chain.copies_overlap
             ? std::min(static_cast<double>(bytes) * chain.from_host_ms, o.backward_ms)
             : 0.0;
}

// The distinct sizes of the inputs a schedule can offload, ascending: x_1 .. x_{n-1} (x_0 is
// the batch or a rerun's input), those above zero.
std::vector<int64_t> OffloadableSizes(const Chain& chain) {
  std::vector<int64_t> sizes;
  for (size_t c = 1; c < chain.stages.size(); ++c) {
    if (chain.stages[c].input > 0) sizes.push_back(chain.stages[c].input);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

// The quantities both the evaluator and the solver read, so that the two cannot disagree.
class Model {
 public:
  explicit Model(const Chain& chain) : chain_(chain), n_(static_cast<int>(chain.stages.size())) {
    grad_prefix_.assign(n_ + 1, 0);
    nograd_prefix_.assign(n_ + 1, 0);
    for (int i = 0; i < n_; ++i) {
      grad_prefix_[i + 1] = grad_prefix_[i] + chain.stages[i].param_grads;
      nograd_prefix_[i + 1] = nograd_prefix_[i] + chain.stages[i].nograd_ms;
    }
  }
  int n() const { return n_; }
  // x_i: the input of stage i; x_n the last stage's output.
  int64_t X(int i) const { return i < n_ ? chain_.stages[i].input : chain_.stages[n_ - 1].output; }
  // What a finished list over [c, b) leaves (docs/chain-solver.md).
  int64_t Net(int c, int b, bool rerun) const {
    if (c == b) return rerun ? 0 : chain_.output_grad;
    return grad_prefix_[b] - grad_prefix_[c] + chain_.stages[c].input_grad + (rerun ? X(b) : 0);
  }
  double NoGradMs(int a, int j) const { return nograd_prefix_[j] - nograd_prefix_[a]; }
  // The peak of running stages [a, j) without a graph, x_a held by the caller.
  int64_t NoGradPeak(int a, int j) const {
    int64_t peak = 0;
    for (int s = a; s < j; ++s) {
      peak = std::max(peak, (s > a ? X(s) : 0) + X(s + 1) + chain_.stages[s].nograd_transient);
    }
    return peak;
  }
  int64_t LossPeak() const {
    return chain_.loss_kept +
           std::max<int64_t>({0, chain_.loss_forward_transient, chain_.loss_backward_transient});
  }
  int64_t StoredForwardPeak(int a, const Option& o) const { return o.kept + o.forward_transient; }
  // A tied parameter's two gradients are summed where both arrive in one backward pass: the
  // step's own, in the model's outline (a rerun runs its own pass).
  int64_t StoredBackwardPeak(int a, int b, bool rerun, const Option& o) const {
    return o.kept + Net(a + 1, b, rerun) + BackwardTransient(a, b, rerun, o) +
           (rerun ? 0 : chain_.stages[a].grad_sum);
  }
  static int64_t BackwardTransient(int a, int b, bool rerun, const Option& o) {
    return rerun && a + 1 == b ? o.held_backward_transient : o.backward_transient;
  }
  double OffloadMs(int a, int j) const {
    return ckpt::chain::OffloadMs(chain_, X(a), NoGradMs(a, j));
  }

 private:
  const Chain& chain_;
  int n_;
  std::vector<int64_t> grad_prefix_;
  std::vector<double> nograd_prefix_;
};

// One element of a list: a stored stage, or a checkpointed (or offloaded) segment with its inner
// list.
struct Element {
  int begin, end;
  bool checkpoint, offloaded;
  const std::vector<Segment>* inner;  // checkpoint only; empty: every stage stored
};

std::vector<Element> ElementsOf(const std::vector<Segment>& segments) {
  std::vector<Element> out;
  for (const Segment& s : segments) {
    if (s.mode == SegmentMode::kStored) {
      for (int i = s.begin; i < s.end; ++i) out.push_back({i, i + 1, false, false, nullptr});
    } else {
      out.push_back({s.begin, s.end, true, s.mode == SegmentMode::kOffloaded, &s.inner});
    }
  }
  return out;
}

// A fetch pending on a list's last backward call (docs/chain-solver.md): its bytes, and whether
// the call is a run's that continues into the list (only a stored head is in it).
struct Pending {
  int64_t bytes = 0;
  bool run_only = false;
};

class Evaluator {
 public:
  Evaluator(const Chain& chain, const Schedule& schedule)
      : chain_(chain), schedule_(schedule), model_(chain) {}

  absl::StatusOr<Cost> List(const std::vector<Segment>& segments, int a, int b, bool rerun,
                            Pending pending) {
    for (const Segment& s : segments) {
      if (s.mode == SegmentMode::kRecomputeAll) {
        return absl::InvalidArgumentError("the chain model has no recompute-all segments");
      }
    }
    const std::vector<Element> elements = ElementsOf(segments);
    return FromElement(elements, 0, a, b, rerun, pending, /*offloadable=*/false);
  }

 private:
  absl::StatusOr<Cost> FromElement(const std::vector<Element>& elements, size_t e, int a, int b,
                                   bool rerun, Pending pending, bool offloadable) {
    if (e == elements.size()) {
      if (rerun) return Cost{0, 0};
      return Cost{chain_.loss_ms, model_.LossPeak() + pending.bytes};
    }
    const Element& el = elements[e];
    if (!el.checkpoint) {
      const int k = schedule_.options[el.begin];
      if (k < 0 || k >= static_cast<int>(chain_.stages[el.begin].options.size())) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", el.begin, " has no option ", k));
      }
      const Option& o = chain_.stages[el.begin].options[k];
      // The run goes on into the rest: a fetch pending on this call is pending on its stages.
      absl::StatusOr<Cost> rest =
          FromElement(elements, e + 1, el.end, b, rerun, {pending.bytes, /*run_only=*/true}, false);
      if (!rest.ok()) return rest;
      const double hidden = pending.run_only ? 0.0 : FetchHiddenMs(chain_, pending.bytes, o);
      return Cost{o.forward_ms + o.backward_ms - hidden + rest->time_ms,
                  std::max({model_.StoredForwardPeak(el.begin, o), o.kept + rest->peak,
                            model_.StoredBackwardPeak(el.begin, b, rerun, o) + pending.bytes})};
    }
    std::vector<Segment> inner = *el.inner;
    if (inner.empty()) inner.push_back({el.begin, el.end, SegmentMode::kStored, {}});
    // An offloaded segment moves its input only where nothing else holds it (core/plan/schedule.h).
    const int64_t moved = el.offloaded && offloadable ? model_.X(el.begin) : 0;
    absl::StatusOr<Cost> rest = FromElement(elements, e + 1, el.end, b, rerun, {moved, false},
                                            /*offloadable=*/true);
    if (!rest.ok()) return rest;
    absl::StatusOr<Cost> rerun_cost =
        List(inner, el.begin, el.end, /*rerun=*/true,
             pending.run_only ? Pending{} : Pending{pending.bytes, false});
    if (!rerun_cost.ok()) return rerun_cost;
    const int64_t held = rerun && el.end == b ? model_.X(el.end) : 0;
    return Cost{
        model_.NoGradMs(el.begin, el.end) + rest->time_ms + rerun_cost->time_ms +
            (moved > 0 ? model_.OffloadMs(el.begin, el.end) : 0.0),
        std::max({model_.NoGradPeak(el.begin, el.end), model_.X(el.end) - moved + rest->peak,
                  model_.Net(el.end, b, rerun) + held + rerun_cost->peak})};
  }

  const Chain& chain_;
  const Schedule& schedule_;
  Model model_;
};

// x rounded to the nearest multiple of unit, in units.
int64_t Units(int64_t x, int64_t unit) { return (x + unit / 2) / unit; }

}  // namespace

Chain FromProfile(const ModelProfile& profile) {
  Chain chain;
  const int n = profile.num_stages();
  // A parameter's gradient is first created by the last stage that uses it (backward runs from
  // the end); its other stages add a contribution, summed for a moment (s_i): their fresh one
  // beside the waiting one where the engine adds in place, else also a new tensor for the sum
  // (core/plan/memory_model.cc says when).
  std::map<int, int> last_user;
  std::map<int, int64_t> sum_bytes;  // the last user's StageProfile::SumBytes
  for (int i = 0; i < n; ++i) {
    const StageProfile& stored = profile.Stored(i);
    for (size_t k = 0; k < stored.param_grads.size(); ++k) {
      last_user[stored.param_grads[k].first] = i;
      sum_bytes[stored.param_grads[k].first] = stored.SumBytes(k);
    }
  }
  std::vector<Stage> stages(n);
  for (int i = 0; i < n; ++i) {
    const StageProfile& stored = profile.Stored(i);
    Stage& s = stages[i];
    s.first = s.last = i;
    s.input = stored.input_bytes;
    s.output = stored.output_bytes;
    s.input_grad = stored.input_grad_bytes;
    for (const auto& [param, bytes] : stored.param_grads) {
      if (last_user[param] == i) {
        // What stays of it: its shard where ranks shard gradients (the whole one is in the
        // measured backward peak).
        auto kept = profile.kept_gradient_bytes.find(param);
        s.param_grads += kept != profile.kept_gradient_bytes.end() ? kept->second : bytes;
      } else {
        s.grad_sum += sum_bytes[param];
      }
    }
    s.nograd_ms = stored.costs.nograd_forward_ms;
    const std::vector<StagePolicy> menu = PolicyMenu(profile.stages[i], profile.menu_chunks);
    for (size_t k = 0; k < profile.measured[i].size(); ++k) {
      const StageProfile& p = profile.measured[i][k];
      if (std::find(menu.begin(), menu.end(), p.policy) == menu.end()) continue;
      s.nograd_transient = std::max(s.nograd_transient, p.nograd_transient_bytes);
      s.options.push_back({static_cast<int>(k), p.costs.forward_ms, p.costs.backward_ms,
                           p.retained_bytes + p.AllocatedOutputBytes(), p.forward_transient_bytes,
                           p.backward_transient_bytes, p.backward_held_transient_bytes});
    }
  }
  chain.loss_kept = profile.loss.retained_bytes + profile.loss.output_bytes;
  chain.loss_forward_transient = profile.loss.forward_transient_bytes;
  chain.loss_backward_transient = profile.loss.backward_transient_bytes;
  chain.output_grad = profile.loss.input_grad_bytes;
  chain.loss_ms = profile.loss.forward_ms + profile.loss.backward_ms;
  if (profile.to_host_bytes_per_ms > 0 && profile.from_host_bytes_per_ms > 0) {
    chain.offload = true;
    chain.to_host_ms = 1.0 / profile.to_host_bytes_per_ms;
    chain.from_host_ms = 1.0 / profile.from_host_bytes_per_ms;
    chain.copies_overlap = profile.copies_overlap;
  }
  if (n <= kMaxSolverStages) {
    chain.stages = std::move(stages);
    return chain;
  }
  // Groups of consecutive stages, near-equal in count, each one stage with every part stored.
  const int groups = kMaxSolverStages;
  for (int g = 0, begin = 0; g < groups; ++g) {
    const int size = n / groups + (g < n % groups ? 1 : 0);
    const int end = begin + size;
    Stage s;
    s.first = begin;
    s.last = end - 1;
    s.input = stages[begin].input;
    s.output = stages[end - 1].output;
    s.input_grad = stages[begin].input_grad;
    Option o;
    o.policy_index = -1;
    int64_t kept_before = 0, forward_peak = 0, backward_peak = 0, nograd_peak = 0;
    for (int i = begin; i < end; ++i) {
      const Stage& t = stages[i];
      const Option& stored = t.options.front();
      s.param_grads += t.param_grads;
      s.grad_sum = std::max(s.grad_sum, t.grad_sum);
      s.nograd_ms += t.nograd_ms;
      nograd_peak =
          std::max(nograd_peak, (i > begin ? t.input : 0) + t.output + t.nograd_transient);
      o.forward_ms += stored.forward_ms;
      o.backward_ms += stored.backward_ms;
      forward_peak = std::max(forward_peak, kept_before + stored.kept + stored.forward_transient);
      backward_peak = std::max(
          backward_peak, kept_before + stored.kept +
                             std::max(stored.backward_transient, stored.held_backward_transient));
      kept_before += stored.kept;
    }
    o.kept = kept_before;
    o.forward_transient = std::max<int64_t>(0, forward_peak - o.kept);
    o.backward_transient = o.held_backward_transient = std::max<int64_t>(0, backward_peak - o.kept);
    s.nograd_transient = std::max<int64_t>(0, nograd_peak - s.output);
    s.options.push_back(o);
    chain.stages.push_back(std::move(s));
    begin = end;
  }
  return chain;
}

Chain Quantize(const Chain& chain, int64_t unit) {
  Chain q = chain;
  auto u = [unit](int64_t& x) { x = Units(x, unit); };
  for (Stage& s : q.stages) {
    u(s.input), u(s.output), u(s.input_grad), u(s.param_grads), u(s.grad_sum),
        u(s.nograd_transient);
    for (Option& o : s.options) {
      u(o.kept), u(o.forward_transient), u(o.backward_transient), u(o.held_backward_transient);
    }
  }
  u(q.loss_kept), u(q.loss_forward_transient), u(q.loss_backward_transient), u(q.output_grad);
  q.to_host_ms *= static_cast<double>(unit);
  q.from_host_ms *= static_cast<double>(unit);
  return q;
}

absl::StatusOr<Cost> Evaluate(const Chain& chain, const Schedule& schedule) {
  const int n = static_cast<int>(chain.stages.size());
  if (static_cast<int>(schedule.options.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("a schedule of ", schedule.options.size(), " options for ", n, " stages"));
  }
  return Evaluator(chain, schedule).List(schedule.segments, 0, n, /*rerun=*/false, Pending{});
}

int Contexts(const Chain& chain) {
  if (!chain.offload) return 1;
  return 2 +
         3 * static_cast<int>(std::min<size_t>(OffloadableSizes(chain).size(), kMaxPendingClasses));
}

Schedule AllStored(const Chain& chain) {
  const int n = static_cast<int>(chain.stages.size());
  Schedule s;
  s.segments.push_back({0, n, SegmentMode::kStored, {}});
  s.options.assign(n, 0);
  return s;
}

Solver::Solver(Chain chain, int max_units)
    : chain_(std::move(chain)),
      n_(static_cast<int>(chain_.stages.size())),
      max_units_(std::max(max_units, 0)),
      width_(static_cast<size_t>(max_units_) + 1) {
  const Model model(chain_);
  x_.resize(n_ + 1);
  net_rerun_.assign(static_cast<size_t>(n_ + 1) * (n_ + 1), 0);
  net_top_.assign(n_ + 1, 0);
  nograd_peak_.assign(static_cast<size_t>(n_ + 1) * (n_ + 1), 0);
  nograd_ms_.assign(static_cast<size_t>(n_ + 1) * (n_ + 1), 0);
  for (int c = 0; c <= n_; ++c) {
    x_[c] = model.X(c);
    net_top_[c] = model.Net(c, n_, /*rerun=*/false);
    for (int b = c; b <= n_; ++b) {
      const size_t cb = static_cast<size_t>(c) * (n_ + 1) + b;
      net_rerun_[cb] = model.Net(c, b, /*rerun=*/true);
      nograd_peak_[cb] = model.NoGradPeak(c, b);
      nograd_ms_[cb] = model.NoGradMs(c, b);
    }
  }
  loss_peak_ = model.LossPeak();
  // The pending classes: the sizes of the inputs that can be offloaded (x_1 .. x_{n-1}; x_0 is
  // the batch or a rerun's input), at most kMaxPendingClasses, each rounded up to one.
  pending_bytes_ = {0};
  pending_least_bytes_ = {0};
  class_of_.assign(n_ + 1, 0);
  if (chain_.offload) {
    const std::vector<int64_t> sizes = OffloadableSizes(chain_);
    const size_t classes = std::min<size_t>(sizes.size(), kMaxPendingClasses);
    for (size_t k = 0; k < classes; ++k) {  // a group's largest size, and its smallest
      pending_bytes_.push_back(sizes[(k + 1) * sizes.size() / classes - 1]);
      pending_least_bytes_.push_back(sizes[k * sizes.size() / classes]);
    }
    for (int c = 1; c < n_; ++c) {
      if (x_[c] <= 0) continue;
      class_of_[c] = static_cast<int>(
          std::lower_bound(pending_bytes_.begin() + 1, pending_bytes_.end(), x_[c]) -
          pending_bytes_.begin());
    }
  }
  // Every context of a range, in State's numbering.
  std::vector<Context> contexts = {Context{}};
  if (chain_.offload) {
    contexts.push_back({0, false, true});
    for (int pending = 1; pending < static_cast<int>(pending_bytes_.size()); ++pending) {
      contexts.push_back({pending, false, false});
      contexts.push_back({pending, false, true});
      contexts.push_back({pending, true, false});
    }
  }
  states_ = static_cast<int>(contexts.size());
  const size_t ranges = static_cast<size_t>(n_) * (n_ + 1) / 2;
  rerun_.assign(ranges * states_ * width_, kInfinity);
  rerun_choice_.assign(ranges * states_ * width_, 0);
  top_.assign(static_cast<size_t>(n_ + 1) * states_ * width_, kInfinity);
  top_choice_.assign(static_cast<size_t>(n_ + 1) * states_ * width_, 0);
  for (const Context& c : contexts) {  // the loss alone, its backward call holding any fetch
    for (int m = 0; m <= max_units_; ++m) {
      top_[At(n_, n_, false, m, c)] = loss_peak_ + pending_bytes_[c.pending] <= m
                                          ? static_cast<float>(chain_.loss_ms)
                                          : kInfinity;
    }
  }
  // Shorter ranges first; within a range, smaller budgets first (a rerun may checkpoint its
  // whole range again, on a smaller budget, in another context); at the top, a range's rerun
  // table before its top.
  for (int length = 1; length <= n_; ++length) {
    for (int a = 0; a + length <= n_; ++a) {
      const int b = a + length;
      for (int m = 0; m <= max_units_; ++m) {
        for (const Context& c : contexts) {
          const size_t at = At(a, b, true, m, c);
          rerun_[at] = Value(a, b, /*rerun=*/true, m, c, &rerun_choice_[at]);
        }
      }
    }
    const int a = n_ - length;
    for (int m = 0; m <= max_units_; ++m) {
      for (const Context& c : contexts) {
        const size_t at = At(a, n_, false, m, c);
        top_[at] = Value(a, n_, /*rerun=*/false, m, c, &top_choice_[at]);
      }
    }
  }
}

int Solver::State(const Context& c) const {
  if (!chain_.offload) return 0;
  if (c.pending == 0) return c.offloadable ? 1 : 0;
  return 2 + 3 * (c.pending - 1) + (c.run_only ? 2 : c.offloadable ? 1 : 0);
}

int Solver::Index(int a, int b) const {
  // Ranges [a, b) with 0 <= a < b <= n, numbered by a then b.
  return a * n_ - a * (a - 1) / 2 + (b - a - 1);
}

size_t Solver::At(int a, int b, bool rerun, int64_t m, const Context& c) const {
  const size_t table = rerun ? static_cast<size_t>(Index(a, b)) : static_cast<size_t>(a);
  return (table * states_ + State(c)) * width_ + std::min<int64_t>(m, max_units_);
}

int64_t Solver::Net(int c, int b, bool rerun) const {
  return rerun ? net_rerun_[static_cast<size_t>(c) * (n_ + 1) + b] : net_top_[c];
}

float Solver::RerunAt(int a, int b, int64_t m, const Context& c) const {
  if (m < 0) return kInfinity;
  if (a == b) return 0;
  return rerun_[At(a, b, true, m, c)];
}

float Solver::TopAt(int a, int64_t m, const Context& c) const {
  if (m < 0) return kInfinity;
  return top_[At(a, n_, false, m, c)];
}

float Solver::Value(int a, int b, bool rerun, int m, const Context& c, int16_t* choice) const {
  auto rest_of = [&](int from, int64_t budget, const Context& next) {
    return rerun ? RerunAt(from, b, budget, next) : TopAt(from, budget, next);
  };
  const int64_t pending = pending_bytes_[c.pending];
  float best = kInfinity;
  *choice = 0;
  const Stage& stage = chain_.stages[a];
  for (size_t k = 0; k < stage.options.size(); ++k) {
    const Option& o = stage.options[k];
    if (o.kept + o.forward_transient > m ||
        o.kept + Net(a + 1, b, rerun) +
                (rerun && a + 1 == b ? o.held_backward_transient : o.backward_transient) +
                (rerun ? 0 : stage.grad_sum) + pending >
            m) {
      continue;
    }
    // What the fetch's copy hides behind, counted for the least bytes of its class: where a
    // class stands for several sizes, the programme errs on the slow side, as on the large.
    const double hidden =
        c.run_only ? 0.0 : FetchHiddenMs(chain_, pending_least_bytes_[c.pending], o);
    const float t = static_cast<float>(o.forward_ms + o.backward_ms - hidden) +
                    rest_of(a + 1, m - o.kept, Context{c.pending, true, false});
    if (t < best) {
      best = t;
      *choice = static_cast<int16_t>(-(static_cast<int>(k) + 1));
    }
  }
  // A checkpointed head's rerun holds this list's last backward call, and so any fetch on it.
  const Context inner{c.run_only ? 0 : c.pending, false, false};
  for (int j = a + 1; chain_.checkpoints && j <= b; ++j) {
    const size_t aj = static_cast<size_t>(a) * (n_ + 1) + j;
    if (nograd_peak_[aj] > m) continue;
    // A rerun that checkpoints its whole range again keeps x_j for nothing: never faster, and
    // with x_j of zero units it would read its own entry.
    const int64_t held = rerun && j == b ? x_[j] : 0;
    if (held == 0 && rerun && j == b) continue;
    const float rerun_ms = RerunAt(a, j, m - Net(j, b, rerun) - held, inner);
    if (rerun_ms == kInfinity) continue;
    const float rest = rest_of(j, m - x_[j], Context{0, false, true});
    const float t = static_cast<float>(nograd_ms_[aj]) + rest + rerun_ms;
    if (t < best) {
      best = t;
      *choice = static_cast<int16_t>(j);
    }
    // Offloaded: x_a off the device through the rest, fetched for its last backward call. At
    // the end of a rerun that call is not the rest's, and offloading frees nothing.
    if (!c.offloadable || class_of_[a] == 0 || (rerun && j == b)) continue;
    const float rest_offloaded = rest_of(j, m - x_[j] + x_[a], Context{class_of_[a], false, true});
    const float offloaded =
        static_cast<float>(nograd_ms_[aj] + OffloadMs(chain_, x_[a], nograd_ms_[aj])) +
        rest_offloaded + rerun_ms;
    if (offloaded < best) {
      best = offloaded;
      *choice = static_cast<int16_t>(kOffloaded + j);
    }
  }
  return best;
}

double Solver::Time(int units) const { return TopAt(0, std::min(units, max_units_), Context{}); }

Schedule Solver::ScheduleAt(int units) const {
  Schedule out;
  out.options.assign(n_, 0);
  Build(0, n_, /*rerun=*/false, std::min(units, max_units_), Context{}, out, out.segments);
  return out;
}

void Solver::Build(int a, int b, bool rerun, int64_t m, Context c, Schedule& out,
                   std::vector<Segment>& list) const {
  while (a < b) {
    const size_t at = At(a, b, rerun, m, c);
    const int16_t choice = rerun ? rerun_choice_[at] : top_choice_[at];
    if (choice < 0) {  // stage a stored under option -choice - 1
      const int k = -choice - 1;
      out.options[a] = k;
      if (!list.empty() && list.back().mode == SegmentMode::kStored && list.back().end == a) {
        list.back().end = a + 1;
      } else {
        list.push_back({a, a + 1, SegmentMode::kStored, {}});
      }
      m = std::min<int64_t>(m - chain_.stages[a].options[k].kept, max_units_);
      c = Context{c.pending, true, false};
      a += 1;
      continue;
    }
    const bool offloaded = choice >= kOffloaded;
    const int j = offloaded ? choice - kOffloaded : choice;
    const int64_t held = rerun && j == b ? x_[j] : 0;
    Segment segment{a, j, offloaded ? SegmentMode::kOffloaded : SegmentMode::kCheckpointed, {}};
    Build(a, j, /*rerun=*/true, std::min<int64_t>(m - Net(j, b, rerun) - held, max_units_),
          Context{c.run_only ? 0 : c.pending, false, false}, out, segment.inner);
    if (segment.inner.size() == 1 && segment.inner.front().mode == SegmentMode::kStored) {
      segment.inner.clear();  // every stage stored: the canonical empty inner plan
    }
    list.push_back(std::move(segment));
    m = std::min<int64_t>(m - x_[j] + (offloaded ? x_[a] : 0), max_units_);
    c = Context{offloaded ? class_of_[a] : 0, false, true};
    a = j;
  }
}

namespace {
std::vector<Segment> Expand(const std::vector<Segment>& segments, const Chain& chain) {
  std::vector<Segment> out;
  for (const Segment& s : segments) {
    Segment e{chain.stages[s.begin].first, chain.stages[s.end - 1].last + 1, s.mode,
              Expand(s.inner, chain)};
    if (!out.empty() && e.mode == SegmentMode::kStored && out.back().mode == SegmentMode::kStored) {
      out.back().end = e.end;
    } else {
      out.push_back(std::move(e));
    }
  }
  return out;
}
}  // namespace

Plan ToPlan(const ModelProfile& profile, const Chain& chain, const Schedule& schedule) {
  Plan plan;
  plan.segments = Expand(schedule.segments, chain);
  plan.stage_policies.assign(profile.num_stages(), StagePolicy());
  for (size_t i = 0; i < chain.stages.size(); ++i) {
    const Option& o = chain.stages[i].options[schedule.options[i]];
    if (o.policy_index >= 0) {
      plan.stage_policies[chain.stages[i].first] =
          profile.measured[chain.stages[i].first][o.policy_index].policy;
    }
  }
  if (std::all_of(plan.stage_policies.begin(), plan.stage_policies.end(),
                  [](const StagePolicy& p) { return p.IsDefault(); })) {
    plan.stage_policies.clear();
  }
  return plan;
}

}  // namespace ckpt::chain
