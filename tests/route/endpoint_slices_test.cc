#include "route/endpoint_slices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gecd::route {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

}  // namespace

// Readable failures.
void PrintTo(const DiscoveredEndpoint& e, std::ostream* os) {
  *os << e.address << (e.draining ? " (draining)" : "");
}

namespace {

std::vector<DiscoveredEndpoint> Eps(std::vector<std::pair<std::string, bool>> list) {
  std::vector<DiscoveredEndpoint> out;
  for (auto& [address, draining] : list) out.push_back({.address = address, .draining = draining});
  return out;
}

json Slice(json endpoints,
           json ports = json::array({{{"name", "grpc"}, {"port", 50051}, {"protocol", "TCP"}}}),
           std::string address_type = "IPv4") {
  return {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata", {{"name", "gecd-abc12"}, {"resourceVersion", "42"}}},
          {"addressType", address_type},
          {"endpoints", endpoints},
          {"ports", ports}};
}

json Endpoint(std::vector<std::string> addresses, json conditions = json::object()) {
  return {{"addresses", addresses}, {"conditions", conditions}};
}

TEST(ClassifyConditions, ReadyNilMeansTrue) {
  EXPECT_EQ(ClassifyConditions(std::nullopt, std::nullopt, std::nullopt), EndpointUse::kEligible);
  EXPECT_EQ(ClassifyConditions(true, true, false), EndpointUse::kEligible);
  EXPECT_EQ(ClassifyConditions(true, std::nullopt, std::nullopt), EndpointUse::kEligible);
}

TEST(ClassifyConditions, NotReadyIsRemoved) {
  EXPECT_EQ(ClassifyConditions(false, false, false), EndpointUse::kRemoved);
  EXPECT_EQ(ClassifyConditions(false, std::nullopt, std::nullopt), EndpointUse::kRemoved);
  // serving without terminating is not enough: ready decides.
  EXPECT_EQ(ClassifyConditions(false, true, false), EndpointUse::kRemoved);
}

TEST(ClassifyConditions, ServingAndTerminatingDrains) {
  EXPECT_EQ(ClassifyConditions(false, true, true), EndpointUse::kDraining);
  // ready stays true while terminating with publishNotReadyAddresses: still no new requests.
  EXPECT_EQ(ClassifyConditions(true, true, true), EndpointUse::kDraining);
  // serving nil defers to ready.
  EXPECT_EQ(ClassifyConditions(true, std::nullopt, true), EndpointUse::kDraining);
}

TEST(ClassifyConditions, TerminatingNotServingIsRemoved) {
  EXPECT_EQ(ClassifyConditions(false, false, true), EndpointUse::kRemoved);
  EXPECT_EQ(ClassifyConditions(false, std::nullopt, true), EndpointUse::kRemoved);
}

TEST(ParseEndpointSlice, AppliesTheConditionsToEveryAddress) {
  const json slice = Slice(json::array({
      Endpoint({"10.0.0.1"}),  // no conditions: ready
      Endpoint({"10.0.0.2"}, {{"ready", false}, {"serving", false}, {"terminating", false}}),
      Endpoint({"10.0.0.3"}, {{"ready", false}, {"serving", true}, {"terminating", true}}),
      Endpoint({"10.0.0.4"}, {{"ready", false}, {"serving", false}, {"terminating", true}}),
      Endpoint({"10.0.0.5", "10.0.0.6"}, {{"ready", true}}),
      {{"addresses", {"10.0.0.7"}}},  // no conditions field at all
  }));
  absl::StatusOr<ParsedSlice> parsed = ParseEndpointSlice(slice, "grpc");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->name, "gecd-abc12");
  EXPECT_EQ(parsed->resource_version, "42");
  EXPECT_EQ(parsed->ignored, "");
  EXPECT_EQ(parsed->endpoints, Eps({{"10.0.0.1:50051", false},
                                    {"10.0.0.3:50051", true},
                                    {"10.0.0.5:50051", false},
                                    {"10.0.0.6:50051", false},
                                    {"10.0.0.7:50051", false}}));
}

TEST(ParseEndpointSlice, IPv6InBracketsAndFqdnAsAHostName) {
  absl::StatusOr<ParsedSlice> v6 =
      ParseEndpointSlice(Slice(json::array({Endpoint({"fd00::1"})}),
                               json::array({{{"name", "grpc"}, {"port", 7}}}), "IPv6"),
                         "grpc");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->endpoints, Eps({{"[fd00::1]:7", false}}));
  absl::StatusOr<ParsedSlice> fqdn =
      ParseEndpointSlice(Slice(json::array({Endpoint({"gecd-0.gecd.gec.svc.cluster.local"})}),
                               json::array({{{"name", "grpc"}, {"port", 50051}}}), "FQDN"),
                         "grpc");
  ASSERT_TRUE(fqdn.ok()) << fqdn.status();
  EXPECT_EQ(fqdn->endpoints, Eps({{"gecd-0.gecd.gec.svc.cluster.local:50051", false}}));
}

TEST(ParseEndpointSlice, TakesTheNamedPortOrTheNumber) {
  const json ports = json::array({{{"name", "metrics"}, {"port", 9100}, {"protocol", "TCP"}},
                                  {{"name", "grpc"}, {"port", 50051}, {"protocol", "TCP"}},
                                  {{"name", "dns"}, {"port", 53}, {"protocol", "UDP"}}});
  const json slice = Slice(json::array({Endpoint({"10.0.0.1"})}), ports);
  EXPECT_EQ(ParseEndpointSlice(slice, "metrics")->endpoints, Eps({{"10.0.0.1:9100", false}}));
  EXPECT_EQ(ParseEndpointSlice(slice, "grpc")->endpoints, Eps({{"10.0.0.1:50051", false}}));
  EXPECT_EQ(ParseEndpointSlice(slice, "50051")->endpoints, Eps({{"10.0.0.1:50051", false}}));
  // A UDP port is no gRPC port, by name or by number.
  EXPECT_THAT(ParseEndpointSlice(slice, "53")->ignored, HasSubstr("no TCP port 53"));
  EXPECT_THAT(ParseEndpointSlice(slice, "dns")->ignored, HasSubstr("no TCP port dns"));
}

TEST(ParseEndpointSlice, ASliceWithoutThePortIsIgnoredNotAnError) {
  for (const json& ports :
       {json::array({{{"name", "http"}, {"port", 80}}}), json(nullptr), json::array()}) {
    absl::StatusOr<ParsedSlice> parsed =
        ParseEndpointSlice(Slice(json::array({Endpoint({"10.0.0.1"})}), ports), "grpc");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_THAT(parsed->ignored, HasSubstr("no TCP port grpc"));
    EXPECT_THAT(parsed->endpoints, IsEmpty());
  }
  absl::StatusOr<ParsedSlice> other_type =
      ParseEndpointSlice(Slice(json::array(), json::array(), "IPv8"), "grpc");
  ASSERT_TRUE(other_type.ok());
  EXPECT_THAT(other_type->ignored, HasSubstr("addressType IPv8"));
}

TEST(ParseEndpointSlice, NullEndpointsIsAnEmptySlice) {
  absl::StatusOr<ParsedSlice> parsed = ParseEndpointSlice(Slice(nullptr), "grpc");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->endpoints, IsEmpty());
  EXPECT_EQ(parsed->ignored, "");
}

TEST(ParseEndpointSlice, WrongTypesAreErrorsNamingTheField) {
  struct Case {
    json slice;
    std::string message;
  };
  json no_name = Slice(json::array());
  no_name["metadata"].erase("name");
  json bad_ready =
      Slice(json::array({Endpoint({"10.0.0.1"}), Endpoint({"10.0.0.2"}, {{"ready", "yes"}})}));
  json bad_address = Slice(json::array({Endpoint({"10.0.0.1"})}));
  bad_address["endpoints"][0]["addresses"] = json::array({7});
  json no_addresses = Slice(json::array({{{"conditions", json::object()}}}));
  json bad_port = Slice(json::array(), json::array({{{"name", "grpc"}, {"port", "50051"}}}));
  json big_port = Slice(json::array(), json::array({{{"name", "grpc"}, {"port", 70000}}}));
  json no_type = Slice(json::array());
  no_type.erase("addressType");
  const Case cases[] = {
      {json::array(), "EndpointSlice: not an object"},
      {no_name, "EndpointSlice: metadata.name: missing"},
      {bad_ready, "EndpointSlice gecd-abc12: endpoints[1].conditions.ready: not a boolean"},
      {bad_address, "EndpointSlice gecd-abc12: endpoints[0].addresses[0]: not a non-empty string"},
      {no_addresses, "EndpointSlice gecd-abc12: endpoints[0].addresses: missing"},
      {bad_port, "EndpointSlice gecd-abc12: ports[0].port: not an integer"},
      {big_port, "EndpointSlice gecd-abc12: ports[0].port: 70000 is out of range"},
      {no_type, "EndpointSlice gecd-abc12: addressType: missing"},
      {Slice(json::object()), "EndpointSlice gecd-abc12: endpoints: not an array"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ParsedSlice> parsed = ParseEndpointSlice(c.slice, "grpc");
    ASSERT_FALSE(parsed.ok()) << c.message;
    EXPECT_EQ(std::string(parsed.status().message()), c.message);
  }
}

TEST(SliceSet, MergesSlicesDeduplicatedAndSorted) {
  SliceSet set;
  set.Upsert({.name = "b",
              .resource_version = "",
              .ignored = "",
              .endpoints = Eps({{"10.0.0.3:1", false}, {"10.0.0.1:1", false}})});
  set.Upsert({.name = "a",
              .resource_version = "",
              .ignored = "",
              .endpoints = Eps({{"10.0.0.2:1", true}, {"10.0.0.1:1", false}})});
  EXPECT_EQ(set.Merged(),
            Eps({{"10.0.0.1:1", false}, {"10.0.0.2:1", true}, {"10.0.0.3:1", false}}));
  // Eligible in one slice, draining in another (a pod moving between slices): eligible.
  set.Upsert({.name = "c",
              .resource_version = "",
              .ignored = "",
              .endpoints = Eps({{"10.0.0.3:1", true}, {"10.0.0.2:1", false}})});
  EXPECT_EQ(set.Merged(),
            Eps({{"10.0.0.1:1", false}, {"10.0.0.2:1", false}, {"10.0.0.3:1", false}}));
  set.Erase("c");
  set.Upsert({.name = "a",
              .resource_version = "",
              .ignored = "",
              .endpoints = {}});  // replaced, not added to
  EXPECT_EQ(set.Merged(), Eps({{"10.0.0.1:1", false}, {"10.0.0.3:1", false}}));
  set.Erase("b");
  set.Erase("unknown");
  EXPECT_THAT(set.Merged(), IsEmpty());
  EXPECT_EQ(set.size(), 1u);
}

}  // namespace
}  // namespace gecd::route
