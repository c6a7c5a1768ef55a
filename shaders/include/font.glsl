// A 5x7 bitmap font for ASCII 32..95 (space, digits, upper case, punctuation); callers map
// lower case to upper case. Glyph g = FONT[code - 32]: row r (0 = top) is byte r of
// .x (rows 0-3) or byte r-4 of .y (rows 4-6); bit 4 of a row byte is the leftmost column.
#ifndef FONT_GLSL
#define FONT_GLSL

const uvec2 FONT[64] = uvec2[64](
  uvec2(0x00000000u, 0x000000u), uvec2(0x04040404u, 0x040004u), uvec2(0x00000a0au, 0x000000u), uvec2(0x0a1f0a0au, 0x0a0a1fu),  // sp ! " #
  uvec2(0x0e140f04u, 0x041e05u), uvec2(0x04021918u, 0x031308u), uvec2(0x0814120cu, 0x0d1215u), uvec2(0x00000404u, 0x000000u),  // $ % & '
  uvec2(0x08080402u, 0x020408u), uvec2(0x02020408u, 0x080402u), uvec2(0x0e150400u, 0x000415u), uvec2(0x1f040400u, 0x000404u),  // ( ) * +
  uvec2(0x00000000u, 0x08040cu), uvec2(0x1f000000u, 0x000000u), uvec2(0x00000000u, 0x0c0c00u), uvec2(0x04020100u, 0x001008u),  // , - . /
  uvec2(0x1513110eu, 0x0e1119u), uvec2(0x04040c04u, 0x0e0404u), uvec2(0x0201110eu, 0x1f0804u), uvec2(0x0204021fu, 0x0e1101u),  // 0 1 2 3
  uvec2(0x120a0602u, 0x02021fu), uvec2(0x011e101fu, 0x0e1101u), uvec2(0x1e100806u, 0x0e1111u), uvec2(0x0402011fu, 0x080808u),  // 4 5 6 7
  uvec2(0x0e11110eu, 0x0e1111u), uvec2(0x0f11110eu, 0x0c0201u), uvec2(0x000c0c00u, 0x000c0cu), uvec2(0x000c0c00u, 0x08040cu),  // 8 9 : ;
  uvec2(0x10080402u, 0x020408u), uvec2(0x001f0000u, 0x00001fu), uvec2(0x01020408u, 0x080402u), uvec2(0x0201110eu, 0x040004u),  // < = > ?
  uvec2(0x0d01110eu, 0x0e1515u), uvec2(0x1f11110eu, 0x111111u), uvec2(0x1e11111eu, 0x1e1111u), uvec2(0x1010110eu, 0x0e1110u),  // @ A B C
  uvec2(0x1111121cu, 0x1c1211u), uvec2(0x1e10101fu, 0x1f1010u), uvec2(0x1e10101fu, 0x101010u), uvec2(0x1710110eu, 0x0f1111u),  // D E F G
  uvec2(0x1f111111u, 0x111111u), uvec2(0x0404040eu, 0x0e0404u), uvec2(0x02020207u, 0x0c1202u), uvec2(0x18141211u, 0x111214u),  // H I J K
  uvec2(0x10101010u, 0x1f1010u), uvec2(0x15151b11u, 0x111111u), uvec2(0x15191111u, 0x111113u), uvec2(0x1111110eu, 0x0e1111u),  // L M N O
  uvec2(0x1e11111eu, 0x101010u), uvec2(0x1111110eu, 0x0d1215u), uvec2(0x1e11111eu, 0x111214u), uvec2(0x0e10100fu, 0x1e0101u),  // P Q R S
  uvec2(0x0404041fu, 0x040404u), uvec2(0x11111111u, 0x0e1111u), uvec2(0x11111111u, 0x040a11u), uvec2(0x15111111u, 0x0a1515u),  // T U V W
  uvec2(0x040a1111u, 0x11110au), uvec2(0x040a1111u, 0x040404u), uvec2(0x0402011fu, 0x1f1008u), uvec2(0x0808080eu, 0x0e0808u),  // X Y Z [
  uvec2(0x04081000u, 0x000102u), uvec2(0x0202020eu, 0x0e0202u), uvec2(0x00110a04u, 0x000000u), uvec2(0x00000000u, 0x1f0000u)   // backslash ] ^ _
);

// is pixel (x, y) of a 5x7 glyph cell set? (outside the 5x7 box: false)
bool font_pixel(int code, int x, int y) {
  if (code < 32 || code > 95 || x < 0 || x > 4 || y < 0 || y > 6) return false;
  uvec2 g = FONT[code - 32];
  uint row = (y < 4 ? g.x >> (8 * y) : g.y >> (8 * (y - 4))) & 0x1fu;
  return ((row >> (4 - x)) & 1u) != 0u;
}

#endif
