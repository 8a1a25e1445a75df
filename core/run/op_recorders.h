// The profiler's operator observers: RecordFunction callbacks on the operators this thread
// runs, installed for a recorder's lifetime (one recorder of each kind at a time on a thread).
//
//   OpWork work;
//   {
//     const WorkRecorder recorder(work);
//     outputs = model.RunStage(i, inputs, parts, batch);
//   }  // work: the stage's FLOPs, bytes moved and operator count (core/plan/profile.h)
#pragma once

#include <set>
#include <string>

#include "ATen/record_function.h"
#include "core/plan/profile.h"

namespace ckpt {

// Adds to `sink` the operators of StageProfile::float32_ops: those the running code calls (not
// those they call in turn) that compute a new float32 tensor from floating-point inputs by more
// than a copy, named without "aten::".
class Float32OpsRecorder {
 public:
  explicit Float32OpsRecorder(std::set<std::string>& sink);
  ~Float32OpsRecorder();
  Float32OpsRecorder(const Float32OpsRecorder&) = delete;
  Float32OpsRecorder& operator=(const Float32OpsRecorder&) = delete;

 private:
  at::CallbackHandle handle_;
};

// Adds to `sink` the work of what runs (OpWork): the FLOPs of matrix products and convolutions
// at any depth, and the bytes and count of the operators the code called, views apart.
class WorkRecorder {
 public:
  explicit WorkRecorder(OpWork& sink);
  ~WorkRecorder();
  WorkRecorder(const WorkRecorder&) = delete;
  WorkRecorder& operator=(const WorkRecorder&) = delete;

 private:
  at::CallbackHandle handle_;
};

}  // namespace ckpt
