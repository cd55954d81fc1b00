#include "tls/server_tls.h"

#include <openssl/ssl.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"
#include "tls/test_certificates.h"

namespace gecd::tls {
namespace {

using ::testing::HasSubstr;
using testing::PemPair;
using testing::TestCa;
using testing::TlsHandshakes;
using testing::Trusting;
using testing::WriteTestFile;

// One grpc.health.v1 Check over a new connection (a channel of its own, with its own
// subchannel pool, so no connection is shared with an earlier call): the status code.
grpc::StatusCode Check(int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetSslTargetNameOverride("localhost");
  grpc::GenericStub stub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), credentials, args));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  return done.get_future().get().error_code();
}

class ServerTlsTest : public ::testing::Test {
 protected:
  ServerTlsTest() : ca_("server CA"), clients_("client CA"), other_("another CA") {
    tls_.cert_file = dir_.path() + "/server.crt";
    tls_.key_file = dir_.path() + "/server.key";
    tls_.refresh_s = 1;
    Write(ca_.Issue("server"));
  }
  ~ServerTlsTest() override {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }
  void Write(const PemPair& pair) { WritePemPair(pair, tls_.cert_file, tls_.key_file); }
  void Start() {
    absl::StatusOr<std::unique_ptr<ServerTls>> tls = ServerTls::Create(tls_);
    ASSERT_TRUE(tls.ok()) << tls.status();
    server_tls_ = *std::move(tls);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", server_tls_->credentials(), &port_);
    // A callback service (answering UNIMPLEMENTED), so the server polls its own queues.
    builder.RegisterCallbackGenericService(&generic_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  // Polls for the rotation (the files are read every refresh_s, twice: here and in gRPC).
  bool WaitFor(const std::shared_ptr<grpc::ChannelCredentials>& credentials,
               grpc::StatusCode want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Check(port_, credentials) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  gecd::testing::ScopedTempDir dir_;
  TestCa ca_, clients_, other_;
  config::TlsSection tls_;
  std::unique_ptr<ServerTls> server_tls_;
  grpc::CallbackGenericService generic_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(ServerTlsTest, ServesTlsAndRefusesPlaintext) {
  Start();
  EXPECT_EQ(Check(port_, Trusting(ca_)), grpc::StatusCode::OK);
  EXPECT_EQ(Check(port_, grpc::InsecureChannelCredentials()), grpc::StatusCode::UNAVAILABLE);
  // A client that trusts another CA does not accept the server.
  EXPECT_EQ(Check(port_, Trusting(other_)), grpc::StatusCode::UNAVAILABLE);
}

// TLS 1.2 at least, with forward-secret AEAD ciphers only.
TEST_F(ServerTlsTest, RefusesTlsBelow12AndCiphersWithoutForwardSecrecyOrAead) {
  Start();
  EXPECT_TRUE(TlsHandshakes(port_, TLS1_3_VERSION));
  EXPECT_TRUE(TlsHandshakes(port_, TLS1_2_VERSION));
  EXPECT_FALSE(TlsHandshakes(port_, TLS1_1_VERSION));
  EXPECT_FALSE(TlsHandshakes(port_, TLS1_VERSION));
  EXPECT_FALSE(TlsHandshakes(port_, TLS1_2_VERSION, "AES128-SHA"));  // RSA key exchange, CBC
  EXPECT_FALSE(TlsHandshakes(port_, TLS1_2_VERSION, "ECDHE-ECDSA-AES128-SHA"));  // CBC
  EXPECT_TRUE(TlsHandshakes(port_, TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256"));
}

TEST_F(ServerTlsTest, MutualTlsRefusesClientsWithoutACertificateOfItsCa) {
  tls_.client_ca_file = dir_.path() + "/clients.crt";
  tls_.require_client_cert = true;
  WriteTestFile(tls_.client_ca_file, clients_.certificate());
  Start();
  const PemPair client = clients_.Issue("router");
  const PemPair stranger = other_.Issue("router");
  EXPECT_EQ(Check(port_, Trusting(ca_, &client)), grpc::StatusCode::OK);
  EXPECT_EQ(Check(port_, Trusting(ca_)), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Check(port_, Trusting(ca_, &stranger)), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Check(port_, grpc::InsecureChannelCredentials()), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ServerTlsTest, OptionalClientCertificatesAreVerifiedWhenSent) {
  tls_.client_ca_file = dir_.path() + "/clients.crt";
  WriteTestFile(tls_.client_ca_file, clients_.certificate());
  Start();
  const PemPair client = clients_.Issue("router");
  const PemPair stranger = other_.Issue("router");
  EXPECT_EQ(Check(port_, Trusting(ca_)), grpc::StatusCode::OK);
  EXPECT_EQ(Check(port_, Trusting(ca_, &client)), grpc::StatusCode::OK);
  EXPECT_EQ(Check(port_, Trusting(ca_, &stranger)), grpc::StatusCode::UNAVAILABLE);
}

// A pair rotated on disk serves the next connection; a bad pair after it is not served (it is
// logged) and the good one stays in use, also for connections made after it.
TEST_F(ServerTlsTest, RotatedPairServesNewConnectionsAndABadOneIsNotTaken) {
  Start();
  const TestCa next("next server CA");
  ASSERT_EQ(Check(port_, Trusting(next)), grpc::StatusCode::UNAVAILABLE);
  Write(next.Issue("server"));
  EXPECT_TRUE(WaitFor(Trusting(next), grpc::StatusCode::OK));
  EXPECT_EQ(Check(port_, Trusting(ca_)), grpc::StatusCode::UNAVAILABLE);

  // A key that is not the certificate's, then a file that is not PEM: both kept out.
  const PemPair a = ca_.Issue("a");
  const PemPair b = ca_.Issue("b");
  Write({a.certificate, b.key});
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // two refresh periods
  EXPECT_EQ(Check(port_, Trusting(next)), grpc::StatusCode::OK);
  WriteTestFile(tls_.cert_file, "garbage");
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_EQ(Check(port_, Trusting(next)), grpc::StatusCode::OK);
  // And a good pair after the bad ones is taken.
  Write(a);
  EXPECT_TRUE(WaitFor(Trusting(ca_), grpc::StatusCode::OK));
}

TEST_F(ServerTlsTest, BadFilesAtStartAreErrorsNamingThem) {
  WriteTestFile(tls_.key_file, "nothing");
  absl::StatusOr<std::unique_ptr<ServerTls>> tls = ServerTls::Create(tls_);
  ASSERT_FALSE(tls.ok());
  EXPECT_THAT(tls.status().message(), HasSubstr(absl::StrCat("tls.key_file ", tls_.key_file)));
}

}  // namespace
}  // namespace gecd::tls
