package memo

import "testing"

func TestKeysSeparateParts(t *testing.T) {
	if KeyOf([]byte("ab"), []byte("c")) == KeyOf([]byte("a"), []byte("bc")) {
		t.Error("parts that concatenate alike share a key")
	}
	a, b := []byte("a"), []byte("a")
	if KeyOf(a) != KeyOf(b) {
		t.Error("the same parts have different keys")
	}
}

func TestBounded(t *testing.T) {
	m := New[int](3)
	for i := range 10 {
		m.Put(KeyOf([]byte{byte(i)}), i)
	}
	if m.Len() != 3 {
		t.Fatalf("%d entries, want at most 3", m.Len())
	}
	if v, ok := m.Get(KeyOf([]byte{9})); !ok || v != 9 {
		t.Errorf("the last entry put is gone: %v %v", v, ok)
	}
	m.Put(KeyOf([]byte{9}), 90) // replacing drops nothing
	if m.Len() != 3 {
		t.Errorf("%d entries after replacing one", m.Len())
	}
}
