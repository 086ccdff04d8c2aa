// tests/common/adapter_identity_test.cpp: the base-model value, hex printing and parsing,
// ordering and std::hash of AdapterIdentity.
#include "lorakv/common/adapter_identity.h"

#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <unordered_set>

namespace lorakv {
namespace {

TEST(AdapterIdentity, AllZeroIsTheBaseModelAndNothingElse) {
  EXPECT_TRUE(AdapterIdentity::base_model().is_base_model());
  EXPECT_EQ(AdapterIdentity::base_model().hex(), std::string(64, '0'));
  AdapterIdentity last_byte;
  last_byte.digest[31] = 1;
  EXPECT_FALSE(last_byte.is_base_model());
  EXPECT_FALSE(AdapterIdentity{sha256("")}.is_base_model());
  std::ostringstream base, other;
  base << AdapterIdentity::base_model();
  other << last_byte;
  EXPECT_EQ(base.str(), "base-model");
  EXPECT_EQ(other.str(), last_byte.hex());
}

TEST(AdapterIdentity, HexRoundTripsAndBadTextIsRefused) {
  const AdapterIdentity id{sha256("abc")};
  EXPECT_EQ(id.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(AdapterIdentity::from_hex(id.hex()), id);
  std::string upper = id.hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(AdapterIdentity::from_hex(upper), id);
  EXPECT_FALSE(AdapterIdentity::from_hex(id.hex().substr(1)));  // 63 digits
  EXPECT_FALSE(AdapterIdentity::from_hex(id.hex() + "0"));      // 65
  std::string bad = id.hex();
  bad[10] = 'g';
  EXPECT_FALSE(AdapterIdentity::from_hex(bad));
  EXPECT_FALSE(AdapterIdentity::from_hex(""));
}

TEST(AdapterIdentity, OrderingAndHashAgreeWithEquality) {
  AdapterIdentity a, b;
  a.digest[31] = 1;  // differs only in the last byte
  b.digest[31] = 2;
  const AdapterIdentity first_byte{sha256("x")};
  EXPECT_NE(a, b);
  EXPECT_TRUE(a < b);
  EXPECT_FALSE(b < a);
  EXPECT_FALSE(a < a);
  EXPECT_TRUE(AdapterIdentity::base_model() < a);
  EXPECT_EQ(AdapterIdentity{sha256("x")}, first_byte);
  const std::hash<AdapterIdentity> hash;
  EXPECT_EQ(hash(AdapterIdentity{sha256("x")}), hash(first_byte));
  EXPECT_NE(hash(a), hash(b));
  EXPECT_NE(hash(a), hash(AdapterIdentity::base_model()));
  std::unordered_set<AdapterIdentity> set = {a, b, first_byte, AdapterIdentity{sha256("x")}};
  EXPECT_EQ(set.size(), 3u);
  std::map<AdapterIdentity, int> ordered = {{b, 2}, {a, 1}, {AdapterIdentity::base_model(), 0}};
  EXPECT_EQ(ordered.begin()->second, 0);
  EXPECT_EQ(ordered.rbegin()->second, 2);
}

}  // namespace
}  // namespace lorakv
