// tests/common/sha256_test.cpp: SHA-256 against the FIPS 180-2 known answers, streaming
// against one-shot, and the typed updates' fixed encoding.
#include "lorakv/common/sha256.h"

#include <gtest/gtest.h>

#include <string>

#include "lorakv/common/errors.h"

namespace lorakv {
namespace {

const std::string k448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(digest_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(digest_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(digest_hex(sha256(k448)), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(digest_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingInAnyPiecesEqualsOneShot) {
  const Sha256Digest whole = sha256(k448);
  for (size_t cut = 0; cut <= k448.size(); ++cut) {
    Sha256 h;
    h.update(k448.data(), cut).update(k448.data() + cut, k448.size() - cut);
    EXPECT_EQ(h.finish(), whole) << cut;
  }
}

TEST(Sha256, TypedUpdatesHaveAFixedEncoding) {
  const uint8_t le[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  EXPECT_EQ(Sha256().update_u64(0x0102030405060708ULL).finish(), sha256(le, sizeof le));
  const uint8_t one_f64[8] = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f};  // 1.0 = 0x3ff0000000000000
  EXPECT_EQ(Sha256().update_f64(1.0).finish(), sha256(one_f64, sizeof one_f64));
  EXPECT_EQ(Sha256().update_string("ab").finish(), Sha256().update_u64(2).update("ab", 2).finish());
  // Length prefixes keep fields apart: ("a", "bc") is not ("ab", "c").
  EXPECT_NE(Sha256().update_string("a").update_string("bc").finish(),
            Sha256().update_string("ab").update_string("c").finish());
  const Sha256Digest d = sha256("abc");
  EXPECT_EQ(Sha256().update_digest(d).finish(), sha256(d.data(), d.size()));
}

TEST(Sha256, ASpentHasherRefusesMore) {
  Sha256 h;
  h.update_string("x");
  h.finish();
  EXPECT_THROW(h.finish(), InternalError);
  EXPECT_THROW(h.update_u64(1), InternalError);
}

TEST(Sha256, HexIsLowercaseTwoDigitsPerByte) {
  Sha256Digest d{};
  d[0] = 0x0f;
  d[31] = 0xa0;
  EXPECT_EQ(digest_hex(d), "0f" + std::string(60, '0') + "a0");
}

}  // namespace
}  // namespace lorakv
