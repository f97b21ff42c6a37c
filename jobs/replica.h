// One replica of a data-parallel training job (jobs/training_job.h), as the
// job sees it: its session, and where it runs, decided once when the
// replicas start. A replica in this process holds its ReplicaComm here and
// its variables in its session's ResourceMgr; a replica on another task runs
// its graph (its variables, its input, its ReplicaComm) there, reached
// through its session and the restore nodes of its graph ("_restore/<v>",
// a Placeholder and an Assign per variable). What differs between the two,
// reading and writing its variables, is this type's; the training job's
// step code asks on_task() once, where the two kinds of step differ.
//
// Replica 0 is always in this process; its session is the job's training
// session (not owned). Not thread-safe: the job uses a replica from one
// thread at a time (a chunk's thread, or the job's).
#ifndef FLOWSTATE_JOBS_REPLICA_H_
#define FLOWSTATE_JOBS_REPLICA_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"
#include "scheduler/replica_comm.h"
#include "scheduler/session.h"
#include "state/variable.h"

namespace flowstate {

class Replica {
 public:
  // In this process: `session` (owned unless replica 0's, which the job
  // owns: `owned` null) and its participant `comm`.
  static std::unique_ptr<Replica> InProcess(Session* session, std::unique_ptr<Session> owned,
                                            std::shared_ptr<ReplicaComm> comm);
  // On another task: `session` runs its graph there.
  static std::unique_ptr<Replica> OnTask(std::unique_ptr<Session> session);

  Session* session() const { return session_; }
  // Its participant when in this process; null on a task (it is there).
  ReplicaComm* comm() const { return comm_.get(); }
  bool on_task() const { return on_task_; }

  // The variables `names` (model, slots, step), in that order.
  StatusOr<std::vector<Tensor>> ReadVariables(const std::vector<std::string>& names);
  // Assigns values[v] to each variable v of `names`.
  Status AssignVariables(const std::vector<std::string>& names,
                         const std::map<std::string, const Tensor*>& values);

  // The restore nodes of a graph (what AssignVariables feeds on a task):
  // "_restore/<v>" (a Placeholder of v's dtype and shape) and
  // "_restore/<v>/assign" (Assign(v, it)) for each variable v of `g`.
  static void AddRestoreNodes(const std::vector<std::string>& variables, GraphDef* g);

  // The Variable `name` of a graph run by `session` in this process.
  static StatusOr<std::shared_ptr<Variable>> FindVariable(Session* session, const std::string& name);

 private:
  Replica(Session* session, std::unique_ptr<Session> owned, std::shared_ptr<ReplicaComm> comm,
          bool on_task)
      : owned_(std::move(owned)), session_(session), comm_(std::move(comm)), on_task_(on_task) {}

  std::unique_ptr<Session> owned_;
  Session* const session_;
  const std::shared_ptr<ReplicaComm> comm_;
  const bool on_task_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_REPLICA_H_
