// The `plan` strategy's run-wide state: the plan files a run reads, each read once.
// (The strategy itself, `plan:file=PATH`, is in plan_file.cc.)
#pragma once

#include <string>
#include <vector>

namespace ckpt {

// A run's plan files, fixed at its start: while one is alive (the outermost, where they nest),
// each path is read once and every later strategy of that path plans from the same text.
//
//   PlanFileSnapshots snapshots;  // in main, before the strategies are made
//   record.emplace_back("plan_files", absl::StrJoin(snapshots.Digests(), ";"));
class PlanFileSnapshots {
 public:
  PlanFileSnapshots();
  ~PlanFileSnapshots();
  PlanFileSnapshots(const PlanFileSnapshots&) = delete;
  PlanFileSnapshots& operator=(const PlanFileSnapshots&) = delete;

  // Each plan file read so far, as "PATH=DIGEST" (FNV-1a 64 of its text, in hex), sorted by path:
  // what a run's record holds, so that a resume with a changed file is refused.
  std::vector<std::string> Digests() const;

 private:
  bool outermost_ = false;
};

}  // namespace ckpt
