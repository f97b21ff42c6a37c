// The gRPC frontend's catalog services (grpc_frontend.h): what the server
// holds and knows beside sessions and jobs -- Devices, Cluster, Ops, and the
// uploaded Models and Datasets and the Graphs/Gradients call. Each method is
// synchronous on gRPC's pool and a thin adapter over one Service call
// through Frontend::Handle (authentication, errors, metrics), as REST's
// routes are over the same calls.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "api/json_codec.h"
#include "server/grpc/grpc_frontend.h"

namespace flowstate::grpc_internal {
namespace {

using ::grpc::ServerContext;

class DevicesService final : public pb::Devices::Service {
 public:
  explicit DevicesService(Frontend* f) : f_(f) {}
  ::grpc::Status List(ServerContext* ctx, const pb::ListDevicesRequest*,
                      pb::ListDevicesResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Devices/List", [&]() -> Status {
      for (const DeviceInfo& d : f_->service().ListDevices()) {
        proto_convert::DeviceToProto(d, resp->add_devices());
      }
      return Status();
    });
  }

 private:
  Frontend* f_;
};

class ModelsService final : public pb::Models::Service {
 public:
  explicit ModelsService(Frontend* f) : f_(f) {}

  ::grpc::Status Upload(ServerContext* ctx, const pb::UploadModelRequest* req, pb::Model* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Models/Upload", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(ModelInfo m, f_->service().UploadModel(req->data(), req->name()));
      proto_convert::ModelToProto(m, resp);
      return Status();
    });
  }
  ::grpc::Status List(ServerContext* ctx, const pb::ListModelsRequest*,
                      pb::ListModelsResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Models/List", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(std::vector<ModelInfo> list, f_->service().ListModels());
      for (const ModelInfo& m : list) proto_convert::ModelToProto(m, resp->add_models());
      return Status();
    });
  }
  ::grpc::Status Get(ServerContext* ctx, const pb::GetModelRequest* req, pb::Model* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Models/Get", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(ModelInfo m, f_->service().GetModel(req->model_id()));
      proto_convert::ModelToProto(m, resp);
      return Status();
    });
  }
  ::grpc::Status Delete(ServerContext* ctx, const pb::DeleteModelRequest* req,
                        pb::DeleteModelResponse*) override {
    return f_->Handle(ctx, "flowstate.v1.Models/Delete",
                      [&]() -> Status { return f_->service().DeleteModel(req->model_id()); });
  }

 private:
  Frontend* f_;
};

class GraphsService final : public pb::Graphs::Service {
 public:
  explicit GraphsService(Frontend* f) : f_(f) {}

  ::grpc::Status Gradients(ServerContext* ctx, const pb::GradientsRequest* req,
                           pb::GradientsResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Graphs/Gradients", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(GraphDef graph, proto_convert::GraphFromRequest(*req, f_->graph_options()));
      std::vector<std::string> xs(req->xs().begin(), req->xs().end());
      FS_ASSIGN_OR_RETURN(GraphGradients g, f_->service().Gradients(graph, req->y(), xs, req->prefix()));
      resp->set_prefix(g.prefix);
      resp->set_graph_json(api::GraphToJson(g.added));
      for (const Gradient& grad : g.grads) {
        pb::GradientRef* r = resp->add_gradients();
        if (grad.is_sparse) {
          r->set_indices(grad.indices.name());
          r->set_values(grad.values.name());
          r->set_dense_shape(grad.dense_shape.name());
        } else if (!grad.is_none()) {
          r->set_dense(grad.dense.name());
        }
      }
      return Status();
    });
  }

 private:
  Frontend* f_;
};

class DatasetsService final : public pb::Datasets::Service {
 public:
  explicit DatasetsService(Frontend* f) : f_(f) {}

  ::grpc::Status Upload(ServerContext* ctx, const pb::UploadDatasetRequest* req,
                        pb::Dataset* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Datasets/Upload", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(DatasetInfo d, f_->service().UploadDataset(req->dataset_id(), req->offset(),
                                                                     req->data(), req->final()));
      proto_convert::DatasetToProto(d, resp);
      return Status();
    });
  }
  ::grpc::Status List(ServerContext* ctx, const pb::ListDatasetsRequest*,
                      pb::ListDatasetsResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Datasets/List", [&]() -> Status {
      for (const DatasetInfo& d : f_->service().ListDatasets()) {
        proto_convert::DatasetToProto(d, resp->add_datasets());
      }
      return Status();
    });
  }
  ::grpc::Status Get(ServerContext* ctx, const pb::GetDatasetRequest* req, pb::Dataset* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Datasets/Get", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(DatasetInfo d, f_->service().GetDataset(req->dataset_id()));
      proto_convert::DatasetToProto(d, resp);
      return Status();
    });
  }
  ::grpc::Status Delete(ServerContext* ctx, const pb::DeleteDatasetRequest* req,
                        pb::DeleteDatasetResponse*) override {
    return f_->Handle(ctx, "flowstate.v1.Datasets/Delete",
                      [&]() -> Status { return f_->service().DeleteDataset(req->dataset_id()); });
  }

 private:
  Frontend* f_;
};

class ClusterService final : public pb::Cluster::Service {
 public:
  explicit ClusterService(Frontend* f) : f_(f) {}
  ::grpc::Status Get(ServerContext* ctx, const pb::GetClusterRequest*,
                     pb::GetClusterResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Cluster/Get", [&]() -> Status {
      const double now =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      proto_convert::ClusterToProto(f_->service().GetCluster(), now, resp);
      return Status();
    });
  }

 private:
  Frontend* f_;
};

class OpsService final : public pb::Ops::Service {
 public:
  explicit OpsService(Frontend* f) : f_(f) {}
  ::grpc::Status List(ServerContext* ctx, const pb::ListOpsRequest*,
                      pb::ListOpsResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Ops/List", [&]() -> Status {
      for (const OpInfo& op : f_->service().ListOps()) proto_convert::OpToProto(op, resp->add_ops());
      return Status();
    });
  }

 private:
  Frontend* f_;
};

}  // namespace

CatalogServices MakeCatalogServices(Frontend* f) {
  CatalogServices s;
  s.public_api.push_back(std::make_unique<OpsService>(f));
  s.public_api.push_back(std::make_unique<DatasetsService>(f));
  s.public_api.push_back(std::make_unique<GraphsService>(f));
  s.public_api.push_back(std::make_unique<ModelsService>(f));
  s.always.push_back(std::make_unique<DevicesService>(f));
  s.always.push_back(std::make_unique<ClusterService>(f));
  return s;
}

}  // namespace flowstate::grpc_internal
