#include "daemon/grpc_reflection.h"

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"

namespace gecd::daemon {
namespace {

// Drops the reflection plugin from the builder it is set on; nothing else.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string name = grpc::reflection::ProtoServerReflectionPlugin().name();
    std::erase_if(*plugins, [&name](const std::unique_ptr<grpc::ServerBuilderPlugin>& plugin) {
      return plugin->name() == name;
    });
  }
};

}  // namespace

void SetReflection(grpc::ServerBuilder& builder, bool enabled) {
  // Registers the plugin for builders made from now on (idempotent); a no-op once the static
  // initialiser did, but it keeps the library's object file, and so reflection, linked in.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  if (!enabled) builder.SetOption(std::make_unique<WithoutReflection>());
}

}  // namespace gecd::daemon
