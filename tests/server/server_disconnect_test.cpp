// A client that leaves, streaming or not, has its request cancelled within two engine
// steps, and its rows go back to the pools; the server answers the next client.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "tests/server/server_test_util.h"

namespace lorakv::server::testing {
namespace {

// A raw client: sends one request, reads some bytes, then closes its socket.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() { close(); }
  bool connected() const { return connected_; }
  void send_request(const std::string& body) {
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd_, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  }
  // Sends a request whose body stops halfway (Content-Length promises more).
  void send_half(const std::string& body) {
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, body.size() / 2);
    ASSERT_GT(::send(fd_, request.data(), request.size(), 0), 0);
  }
  std::string read_some() {
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

json long_request(bool stream) {
  json body = chat_request("planner", agents::testing::kQuestion, 2000);
  body["ignore_eos"] = true;
  body["stream"] = stream;
  return body;
}

// Steps the engine ran from now until no reply is in flight (at most a few seconds).
int64_t steps_until_idle(agents::Runtime& rt) {
  const int64_t start = rt.stats().driver.steps;
  for (int i = 0; i < 4000 && rt.stats().replies_in_flight > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(rt.stats().replies_in_flight, 0) << "the request still runs";
  return rt.stats().driver.steps - start;
}

void wait_for_tokens(agents::Runtime& rt, int64_t steps) {
  const int64_t start = rt.stats().driver.steps;
  for (int i = 0; i < 20000 && rt.stats().driver.steps < start + steps; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

TEST(ServerDisconnect, AStreamingClientThatLeavesIsCancelledWithinTwoSteps) {
  TestServer s;
  const int64_t idle_bytes = s.runtime().stats().kv_bytes_in_use;
  RawClient c(s.port());
  ASSERT_TRUE(c.connected());
  c.send_request(long_request(true).dump());
  EXPECT_NE(c.read_some().find("200"), std::string::npos);
  wait_for_tokens(s.runtime(), 5);
  ASSERT_EQ(s.runtime().stats().replies_in_flight, 1);
  c.close();
  EXPECT_LE(steps_until_idle(s.runtime()), 2);
  EXPECT_EQ(s.runtime().stats().kv_bytes_in_use, idle_bytes) << "its rows went back to the pools";
  EXPECT_EQ(s.post("/v1/chat/completions", chat_request("planner", "hi", 2)).status, 200);
}

TEST(ServerDisconnect, AWaitingNonStreamingClientThatLeavesIsCancelledWithinTwoSteps) {
  TestServer s;
  RawClient c(s.port());
  ASSERT_TRUE(c.connected());
  c.send_request(long_request(false).dump());
  wait_for_tokens(s.runtime(), 5);
  ASSERT_EQ(s.runtime().stats().replies_in_flight, 1);
  c.close();
  EXPECT_LE(steps_until_idle(s.runtime()), 2);
  const Reply m = s.get("/metrics");
  EXPECT_NE(m.text.find("lorakv_client_disconnects_total 1"), std::string::npos) << m.text;
}

TEST(ServerDisconnect, ABodyClosedHalfwayIsDroppedAndTheServerGoesOn) {
  TestServer s;
  {
    RawClient c(s.port());
    ASSERT_TRUE(c.connected());
    c.send_half(chat_request("planner", agents::testing::kQuestion, 4).dump());
  }
  EXPECT_EQ(s.post("/v1/chat/completions", chat_request("planner", "hi", 2)).status, 200);
  EXPECT_EQ(s.runtime().stats().open_requests, 0);
}

TEST(ServerDisconnect, ShutdownCancelsWhatRunsPastItsGrace) {
  TestServer s;
  json body = long_request(true);
  std::thread client([&] { (void)s.post("/v1/chat/completions", body); });
  wait_for_tokens(s.runtime(), 3);
  s.server().shutdown(std::chrono::milliseconds(100));
  client.join();
  EXPECT_EQ(s.runtime().stats().replies_in_flight, 0);
  EXPECT_FALSE(s.server().running());
}

}  // namespace
}  // namespace lorakv::server::testing
