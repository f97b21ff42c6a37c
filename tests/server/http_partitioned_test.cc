// A partitioned table through the JSON graph form over REST sessions: the
// session holds the parts (the client writes them by name), a lookup and a
// fetch of the table give the logical rows, bad partition counts are 400s
// naming the field and an id out of range is a 400 naming the lookup.
#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

std::string TableGraph(int partitions) {
  return R"({"graph": {"nodes": [
    {"name": "T", "op": "Variable",
     "attrs": {"dtype": "float32", "shape": [5, 2], "partitions": )" +
         std::to_string(partitions) + R"(}},
    {"name": "ids", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
    {"name": "emb", "op": "Gather", "inputs": ["T", "ids"]}]}})";
}

TEST_F(HttpRoutesTest, PartitionedTableThroughSessions) {
  HttpResponse r = Do("POST", "/v1/sessions", TableGraph(2));
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string session = "/v1/sessions/" + std::string(Json::parse(r.body)["session_id"]);
  // mod: part 0 holds rows 0, 2, 4 and part 1 rows 1, 3.
  r = Do("POST", session + "/extend", R"({"graph": {"nodes": [
    {"name": "v0", "op": "Const", "attrs": {"dtype": "float32", "value": [[1, 2], [5, 6], [9, 10]]}},
    {"name": "v1", "op": "Const", "attrs": {"dtype": "float32", "value": [[3, 4], [7, 8]]}},
    {"name": "set0", "op": "Assign", "inputs": ["T/part_0", "v0"]},
    {"name": "set1", "op": "Assign", "inputs": ["T/part_1", "v1"]}]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(Do("POST", session + "/run", R"({"targets": ["set0", "set1"]})").status, 200);
  r = Do("POST", session + "/run",
         R"({"feeds": {"ids": [4, 1, 0, 4]}, "fetches": ["emb", "T"], "encoding": "nested"})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json out = Json::parse(r.body)["outputs"];
  EXPECT_EQ(out["emb"], Json::parse("[[9.0, 10.0], [3.0, 4.0], [1.0, 2.0], [9.0, 10.0]]")) << r.body;
  EXPECT_EQ(out["T"], Json::parse("[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]"))
      << r.body;

  r = Do("POST", session + "/run", R"({"feeds": {"ids": [1, 5]}, "fetches": ["emb"]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorOf(r).node(), "emb/route") << r.body;
  EXPECT_NE(ErrorOf(r).message().find("indices[1] = 5 is not in [0, 5)"), std::string::npos)
      << r.body;

  // Writing the table itself by reference is refused naming the writer.
  r = Do("POST", session + "/extend", R"({"graph": {"nodes": [
    {"name": "v", "op": "Const", "attrs": {"dtype": "float32", "value": [[0, 0]]}},
    {"name": "i", "op": "Const", "attrs": {"dtype": "int32", "value": [0]}},
    {"name": "scatter", "op": "ScatterAdd", "inputs": ["T", "i", "v"]}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HttpRoutesTest, BadPartitionCountsAre400sNamingTheField) {
  for (auto [parts, want] : std::vector<std::pair<int, std::string>>{
           {6, "graph.nodes[0].attrs.partitions: 6 partitions for a table of 5 rows"},
           {0, "graph.nodes[0].attrs.partitions: must be >= 1, got 0"},
           {-1, "graph.nodes[0].attrs.partitions: must be >= 1, got -1"}}) {
    HttpResponse r = Do("POST", "/v1/sessions", TableGraph(parts));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(ErrorOf(r).node(), "T") << r.body;
    EXPECT_NE(ErrorOf(r).message().find(want), std::string::npos) << r.body;
  }
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate
