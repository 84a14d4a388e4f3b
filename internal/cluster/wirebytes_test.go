package cluster

import (
	"encoding/hex"
	"testing"
)

// TestWireBytes pins the encoding of the sample messages byte for byte, so
// that a change to the item types (or their encoders) that changes the
// wire format fails here, not between routers of two versions.
func TestWireBytes(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"placements", encodePlacements(samplePlacements),
			"01018080c0a5cdd5b1b6180df0fecaefbeadde056c6c6d2d30dc0b880ea038000100000000000000066c6c6d2d31320028a00180a4e8030200000000000000056c6c6d2d31000000ffa7d6b907"},
		{"turns", encodeTurns(sampleTurns),
			"01058080c0a5cdd5b1b6180df0fecaefbeadde056c6c6d2d3000b410880eac02a038000300000000000000056c6c6d2d32010000000080d1ca08"},
		{"prefixes", encodePrefixes(samplePrefixes),
			"01028080c0a5cdd5b1b618056c6c6d2d3000000301000000000000000200000000000000ffffffffffffffff056c6c6d2d330102012a00000000000000056c6c6d2d330204022a000000000000002b00000000000000"},
		{"pooled turns", encodePoolItems(KindTurn, "m", sampleTurns, turnAt, appendTurn),
			"0106016d058080c0a5cdd5b1b6180df0fecaefbeadde056c6c6d2d3000b410880eac02a038000300000000000000056c6c6d2d32010000000080d1ca08"},
	} {
		if got := hex.EncodeToString(tc.b); got != tc.want {
			t.Errorf("%s: encoded\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}
