// dE/dY of a layer's output at pixel index ip of channel co (convb.comp, convw.comp): the sum
// of what its readers gave back (gA, and gB with DOUT2: a skip is read twice), times relu'
// (Y > 0) where the layer relus. Include after unet.glsl and the bindings gA, gB, outp.
real grad_out(int co, int ip, int no) {
  real g = gA[co * no + ip];
#ifdef DOUT2
  g += gB[co * no + ip];
#endif
#if RELU
  if (!(outp[co * no + ip] > real(0))) g = real(0);
#endif
  return g;
}
