#include "jobs/replica.h"

#include <map>

#include "state/variable.h"

namespace flowstate {

std::unique_ptr<Replica> Replica::InProcess(Session* session, std::unique_ptr<Session> owned,
                                            std::shared_ptr<ReplicaComm> comm) {
  Session* s = owned != nullptr ? owned.get() : session;
  return std::unique_ptr<Replica>(new Replica(s, std::move(owned), std::move(comm), false));
}

std::unique_ptr<Replica> Replica::OnTask(std::unique_ptr<Session> session) {
  Session* s = session.get();
  return std::unique_ptr<Replica>(new Replica(s, std::move(session), nullptr, true));
}

StatusOr<std::shared_ptr<Variable>> Replica::FindVariable(Session* session,
                                                          const std::string& name) {
  std::shared_ptr<const Graph> g = session->graph();
  const Node* n = g->FindNode(name);
  if (n == nullptr || n->op() != "Variable") return NotFound("no variable '" + name + "'", name);
  std::string container, shared_name;
  if (auto it = n->attrs().find("container"); it != n->attrs().end()) container = it->second.s();
  if (auto it = n->attrs().find("shared_name"); it != n->attrs().end()) shared_name = it->second.s();
  return session->resource_manager()->Lookup<Variable>(container,
                                                        shared_name.empty() ? name : shared_name);
}

StatusOr<std::vector<Tensor>> Replica::ReadVariables(const std::vector<std::string>& names) {
  std::vector<Tensor> out;
  if (on_task_) {
    // Fetched through the session.
    FS_RETURN_IF_ERROR(session_->Run({}, names, {}, &out));
    return out;
  }
  for (const std::string& v : names) {
    FS_ASSIGN_OR_RETURN(std::shared_ptr<Variable> var, FindVariable(session_, v));
    FS_ASSIGN_OR_RETURN(Tensor t, var->Read());
    out.push_back(std::move(t));
  }
  return out;
}

Status Replica::AssignVariables(const std::vector<std::string>& names,
                                const std::map<std::string, const Tensor*>& values) {
  if (on_task_) {
    // Through its graph's restore nodes, in one step.
    std::vector<std::pair<std::string, Tensor>> feeds;
    std::vector<std::string> targets;
    for (const std::string& v : names) {
      feeds.emplace_back("_restore/" + v, *values.at(v));
      targets.push_back("_restore/" + v + "/assign");
    }
    std::vector<Tensor> out;
    return session_->Run(feeds, {}, targets, &out);
  }
  for (const std::string& v : names) {
    FS_ASSIGN_OR_RETURN(std::shared_ptr<Variable> var, FindVariable(session_, v));
    FS_RETURN_IF_ERROR(var->Assign(*values.at(v)));
  }
  return Status();
}

void Replica::AddRestoreNodes(const std::vector<std::string>& variables, GraphDef* g) {
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& n : g->nodes) by_name[n.name] = &n;
  std::vector<NodeDef> added;
  for (const std::string& v : variables) {
    auto it = by_name.find(v);
    if (it == by_name.end()) continue;
    const NodeDef& var = *it->second;
    NodeDef p;
    p.name = "_restore/" + v;
    p.op = "Placeholder";
    p.device = var.device;
    for (const char* a : {"dtype", "shape"}) {
      if (auto at = var.attrs.find(a); at != var.attrs.end()) p.attrs[a] = at->second;
    }
    NodeDef assign;
    assign.name = p.name + "/assign";
    assign.op = "Assign";
    assign.device = var.device;
    assign.inputs = {v, p.name};
    assign.attrs["validate_shape"] = AttrValue(true);
    added.push_back(std::move(p));
    added.push_back(std::move(assign));
  }
  for (NodeDef& n : added) g->nodes.push_back(std::move(n));
}

}  // namespace flowstate
